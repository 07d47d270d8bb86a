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

from typing import Any

# Mid-2026: RAPID on 1.36, REGULAR on 1.35 (cluster-toolkit's A4/A3 Ultra blueprints pin "1.35."), STABLE on 1.34.
CURRENT: dict[str, Any] = {
    "defaultClusterVersion": "1.35.3-gke.1389000",
    "channels": [
        {"channel": "RAPID", "defaultVersion": "1.36.1-gke.1180000", "upgradeTargetVersion": "1.36.1-gke.1180000",
         "validVersions": ["1.36.2-gke.1052000", "1.36.1-gke.1180000", "1.35.4-gke.1131000"]},
        {"channel": "REGULAR", "defaultVersion": "1.35.3-gke.1389000", "upgradeTargetVersion": "1.35.3-gke.1389000",
         "validVersions": ["1.35.4-gke.1131000", "1.35.3-gke.1389000", "1.34.6-gke.1064000", "1.33.9-gke.1060000"]},
        {"channel": "STABLE", "defaultVersion": "1.34.5-gke.1302000", "upgradeTargetVersion": "1.34.5-gke.1302000",
         "validVersions": ["1.34.6-gke.1064000", "1.34.5-gke.1302000", "1.33.9-gke.1060000", "1.33.8-gke.1026000"]},
    ],
    "validMasterVersions": ["1.36.2-gke.1052000", "1.36.1-gke.1180000", "1.35.4-gke.1131000", "1.35.3-gke.1389000",
                            "1.34.6-gke.1064000", "1.34.5-gke.1302000", "1.33.9-gke.1060000", "1.33.8-gke.1026000"],
}
CURRENT["validNodeVersions"] = list(CURRENT["validMasterVersions"])

# Early 2025, before the A4 floors: no channel reaches 1.32.2-gke.1475000 (A4 with RDMA); STABLE
# stops at 1.31, below the GCS FUSE floors too; RAPID meets A3 Ultra's floors but not A4's.
BELOW_FLOOR: dict[str, Any] = {
    "defaultClusterVersion": "1.31.5-gke.1068000",
    "channels": [
        {"channel": "RAPID", "defaultVersion": "1.32.1-gke.1729000", "upgradeTargetVersion": "1.32.1-gke.1729000",
         "validVersions": ["1.32.2-gke.1400000", "1.32.1-gke.1729000"]},
        {"channel": "REGULAR", "defaultVersion": "1.31.5-gke.1068000", "upgradeTargetVersion": "1.31.5-gke.1068000",
         "validVersions": ["1.32.1-gke.1489001", "1.31.6-gke.1020000", "1.31.5-gke.1068000"]},
        {"channel": "STABLE", "defaultVersion": "1.30.9-gke.1127000", "upgradeTargetVersion": "1.30.9-gke.1127000",
         "validVersions": ["1.31.6-gke.1020000", "1.30.9-gke.1127000"]},
    ],
    "validMasterVersions": ["1.32.2-gke.1400000", "1.32.1-gke.1729000", "1.32.1-gke.1489001", "1.31.6-gke.1020000",
                            "1.31.5-gke.1068000", "1.30.9-gke.1127000"],
}
BELOW_FLOOR["validNodeVersions"] = list(BELOW_FLOOR["validMasterVersions"])


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
