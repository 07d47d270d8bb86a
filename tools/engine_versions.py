"""Release-channel data for the mocks: what `gcp.container.get_engine_versions` returns.

Each config is shaped like GKE's `projects.locations.getServerConfig` response (channels with their
default and valid versions, newest first; the version strings are illustrative, not a recording).
`lookup()` derives the data source's outputs from it the way the provider does
(terraform-provider-google google/services/container/data_source_google_container_engine_versions.go
@0262be693c00e5902e2190d2ae307d6112467e31): the valid lists keep the versions that start with
`versionPrefix` and their first is the latest; a channel's latest is its first valid version with the
prefix (absent when none matches); its default ignores the prefix.
"""

from __future__ import annotations

import re
from typing import Any


def server_config(default_cluster: str, **channels: tuple[str, list[str]]) -> dict[str, Any]:
    """A getServerConfig response from each channel's (default version, valid versions newest first): a
    channel's upgrade target is its default, and the valid master and node versions are every channel's,
    newest first."""
    def newest_first(versions: set[str]) -> list[str]:
        return sorted(versions, key=lambda v: tuple(int(n) for n in re.findall(r"\d+", v)), reverse=True)

    every = newest_first({v for _, valid in channels.values() for v in valid})
    return {"defaultClusterVersion": default_cluster,
            "channels": [{"channel": name, "defaultVersion": default, "upgradeTargetVersion": default,
                          "validVersions": list(valid)} for name, (default, valid) in channels.items()],
            "validMasterVersions": every, "validNodeVersions": list(every)}


# Mid-2026: RAPID on 1.36, REGULAR on 1.35 (cluster-toolkit's A4/A3 Ultra blueprints pin "1.35."), STABLE on 1.34.
CURRENT = server_config(
    "1.35.3-gke.1389000",
    RAPID=("1.36.1-gke.1180000", ["1.36.2-gke.1052000", "1.36.1-gke.1180000", "1.35.4-gke.1131000"]),
    REGULAR=("1.35.3-gke.1389000",
             ["1.35.4-gke.1131000", "1.35.3-gke.1389000", "1.34.6-gke.1064000", "1.33.9-gke.1060000"]),
    STABLE=("1.34.5-gke.1302000",
            ["1.34.6-gke.1064000", "1.34.5-gke.1302000", "1.33.9-gke.1060000", "1.33.8-gke.1026000"]))

# Early 2025, before the A4 floors: no channel reaches 1.32.2-gke.1475000 (A4 with RDMA); STABLE
# stops at 1.31, below the GCS FUSE floors too; none ships gcsfuse 3.1 (1.33.2-gke.4655000).
BELOW_FLOOR = server_config(
    "1.31.5-gke.1068000",
    RAPID=("1.32.1-gke.1729000", ["1.32.2-gke.1400000", "1.32.1-gke.1729000"]),
    REGULAR=("1.31.5-gke.1068000", ["1.32.1-gke.1489001", "1.31.6-gke.1020000", "1.31.5-gke.1068000"]),
    STABLE=("1.30.9-gke.1127000", ["1.31.6-gke.1020000", "1.30.9-gke.1127000"]))

# Mid-2025: RAPID has reached gcsfuse 3.1's floor (1.33.2-gke.4655000); REGULAR and STABLE have not.
MID_2025 = server_config(
    "1.32.4-gke.1415000",
    RAPID=("1.33.2-gke.4655000", ["1.33.2-gke.4786000", "1.33.2-gke.4655000"]),
    REGULAR=("1.32.4-gke.1415000", ["1.33.1-gke.1744000", "1.32.4-gke.1415000"]),
    STABLE=("1.32.2-gke.1652000", ["1.32.3-gke.1927000", "1.32.2-gke.1652000"]))


def lookup(server_config: dict[str, Any], version_prefix: str | None = None) -> dict[str, Any]:
    """The getEngineVersions invoke's result (wire keys) for this server config and prefix."""
    prefix = version_prefix or ""
    master = [v for v in server_config["validMasterVersions"] if v.startswith(prefix)]
    node = [v for v in server_config["validNodeVersions"] if v.startswith(prefix)]
    latest = {}
    for ch in server_config["channels"]:
        match = next((v for v in ch["validVersions"] if v.startswith(prefix)), None)
        if match:
            latest[ch["channel"]] = match
    result: dict[str, Any] = {
        "defaultClusterVersion": server_config["defaultClusterVersion"],
        "validMasterVersions": master, "validNodeVersions": node,
        "releaseChannelDefaultVersion": {ch["channel"]: ch["defaultVersion"] for ch in server_config["channels"]},
        "releaseChannelLatestVersion": latest,
        "releaseChannelUpgradeTargetVersion": {ch["channel"]: ch["upgradeTargetVersion"]
                                               for ch in server_config["channels"]},
    }
    if master:
        result["latestMasterVersion"] = master[0]
    if node:
        result["latestNodeVersion"] = node[0]
    return result
