"""The cluster's GKE version: resolved from the release channel after the APIs exist, checked against
documented floors, refused before anything billable; shown plainly as unknown at preview."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog import gcsfuse, gke
from catalog.accelerators import ACCELERATORS
from catalog.capacity import CAPACITIES, Capacity
from catalog.problems import ConfigError
from stacks import compose, config, preflight
from tests.stack_helpers import BASE
from tools import engine_versions, mocking, plan

CLUSTER = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"
SERVICE = "gcp:projects/service:Service"
LOOKUP = "gcp:container/getEngineVersions:getEngineVersions"
BILLABLE = (CLUSTER, POOL)
DOC = json.loads((Path(__file__).parent / "data" / "gke_documented_minimums.json").read_text())


def _raw(overrides: dict[str, str] | None = None) -> dict[str, str]:
    return {**BASE, **{k if ":" in k else f"verl-gke:{k}": v for k, v in (overrides or {}).items()}}


def _run(overrides=None, **kwargs) -> mocking.Run:
    return mocking.run(compose.program, _raw(overrides), "test", **kwargs)


def _newest(channel: str, server_config=engine_versions.CURRENT, prefix: str | None = None) -> str:
    return engine_versions.lookup(server_config, prefix)["releaseChannelLatestVersion"][channel]


def _applies(entry: dict, acc: str, capacity: str) -> bool:
    (kind, value), = entry["applies"].items()
    if kind == "accelerator":
        return value == acc
    if kind == "capacity":
        return value == capacity
    if kind == "mountOption":
        return any(o.startswith(value) and not o.endswith(":false") for o in gcsfuse.MOUNT_OPTIONS)
    return gcsfuse.VOLUME_ATTRIBUTES.get(value) == "true"


# --- floors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("capacity", CAPACITIES)
@pytest.mark.parametrize("acc", sorted(ACCELERATORS))
def test_floors_cover_every_documented_minimum(acc, capacity):
    if capacity not in ACCELERATORS[acc].consumption:
        pytest.skip(f"{acc} is not offered as {capacity} (the gate refuses it)")
    # The base config's 32B model does not fit 2 x L4: the L4 rows take the dev stack's 0.5B.
    small = {"model": "Qwen/Qwen2.5-0.5B-Instruct"} if ACCELERATORS[acc].gpus_per_node < 8 else {}
    cfg = config.load(_raw({"accelerator": acc, "capacity": capacity, **small,
                            **({"reservation": "res-a"} if capacity == "reservation" else {})}), "t")
    ours = gke.highest(cfg.cluster.floors)
    for entry in DOC["floors"]:
        if _applies(entry, acc, capacity):
            assert gke.version_key(ours.version) >= gke.version_key(entry["version"]), (entry["what"], ours)
    if acc in DOC["tutorial_minimums"]:  # the tutorial covers A4 and A3 Ultra only
        assert gke.version_key(ours.version) > gke.version_key(DOC["tutorial_minimums"][acc]), \
            "the tutorial's minimum is below what Google documents"


def test_every_floor_names_its_source():
    floors = [f for a in ACCELERATORS.values() for f in a.gke_floors] + list(gcsfuse.gke_floors())
    floors += [f for kind in CAPACITIES for f in Capacity(kind).gke_floors]
    assert floors and all(f.source and f.needed_for for f in floors)
    with pytest.raises(ValueError):
        gke.Floor("1.32", "a minor is not a floor", "x")


def test_gcsfuse_floors_follow_the_options_in_use():
    assert {f.version for f in gcsfuse.gke_floors()} == {
        e["version"] for e in DOC["floors"] if set(e["applies"]) & {"mountOption", "volumeAttribute", "volumeHandle"}}
    off = gcsfuse.gke_floors(("write:enable-streaming-writes:false",), {"gcsfuseMetadataPrefetchOnMount": "false"})
    assert off == ()


# --- resolution -----------------------------------------------------------------------------------


@pytest.mark.parametrize("channel", ["RAPID", "REGULAR", "STABLE"])
@pytest.mark.parametrize("acc,mode", [("b200", "autopilot"), ("h200", "standard")])
def test_cluster_is_created_at_the_channels_newest_version(acc, mode, channel):
    run = _run({"accelerator": acc, "clusterMode": mode, "releaseChannel": channel})
    cluster = run.one(CLUSTER)
    assert cluster.inputs["minMasterVersion"] == _newest(channel)
    assert cluster.inputs["releaseChannel"] == {"channel": channel}
    # A later run resolving a newer patch must not force an update (cluster-toolkit ignores it too).
    assert "minMasterVersion" in cluster.ignore_changes
    lookup = next(i for i in run.invokes if i.token == LOOKUP)
    assert lookup.args["location"] == "us-central1" and lookup.args["project"] == "test-project-1"
    assert "versionPrefix" not in lookup.args
    assert run.outputs["gkeVersion"].startswith(_newest(channel) + " (")
    # Node pools are created at the cluster's version: none pins its own.
    assert all("version" not in p.inputs for p in run.of_type(POOL))


def test_a_minor_pin_takes_its_newest_patch_through_the_prefix():
    run = _run({"gkeVersion": "1.34"})
    assert next(i for i in run.invokes if i.token == LOOKUP).args["versionPrefix"] == "1.34."
    assert run.one(CLUSTER).inputs["minMasterVersion"] == _newest("REGULAR", prefix="1.34.") == "1.34.6-gke.1064000"


def test_a_full_pin_the_channel_offers_is_used_as_given():
    run = _run({"gkeVersion": "1.34.5-gke.1302000", "releaseChannel": "STABLE"})
    assert run.one(CLUSTER).inputs["minMasterVersion"] == "1.34.5-gke.1302000"


@pytest.mark.parametrize("overrides,server_config,key,needles", [
    # The REGULAR channel in early 2025 stops below the A4 floor.
    ({}, engine_versions.BELOW_FLOOR, "verl-gke:releaseChannel", ["1.32.1-gke.1489001", "1.33.2-gke.4655000"]),
    ({"accelerator": "h200", "releaseChannel": "STABLE"}, engine_versions.BELOW_FLOOR, "verl-gke:releaseChannel",
     ["1.31.6-gke.1020000", "1.33.2-gke.4655000", "gcsfuse 3.1"]),
    ({"accelerator": "h200", "clusterMode": "autopilot", "releaseChannel": "STABLE"}, engine_versions.BELOW_FLOOR,
     "verl-gke:releaseChannel", ["1.31.6-gke.1020000", "below 1.33.2-gke.4655000"]),
    ({"gkeVersion": "1.36"}, engine_versions.BELOW_FLOOR, "verl-gke:gkeVersion", ["offers no 1.36.x"]),
    # A patch GKE no longer offers: what the tutorial's pin runs into (400 "Master version ... is unsupported").
    ({"gkeVersion": "1.34.1-gke.1000000"}, engine_versions.CURRENT, "verl-gke:gkeVersion",
     ["not a version GKE offers"]),
    ({"gkeVersion": "1.36.2-gke.1052000", "releaseChannel": "STABLE"}, engine_versions.CURRENT, "verl-gke:gkeVersion",
     ["newer than 1.34.6-gke.1064000"]),
])
def test_a_refused_version_stops_the_update_before_anything_billable(overrides, server_config, key, needles):
    result = mocking.Run()
    with pytest.raises(ConfigError) as err:
        _run(overrides, server_config=server_config, result=result)
    problem = next(p for p in err.value.found if p.key == key)
    for needle in needles:
        assert needle in problem.allowed, problem.allowed
    assert not [r for r in result.resources if r.type in BILLABLE], "the cluster must not be registered"


def test_a_channel_that_meets_the_floor_passes_where_another_does_not():
    # Mid-2025 RAPID already offers 1.33.2-gke.4786000: enough for gcsfuse 3.1; REGULAR is refused.
    run = _run({"accelerator": "h200", "releaseChannel": "RAPID"}, server_config=engine_versions.MID_2025)
    assert run.one(CLUSTER).inputs["minMasterVersion"] == "1.33.2-gke.4786000"
    with pytest.raises(ConfigError, match="1.33.1-gke.1744000"):
        _run({"accelerator": "h200"}, server_config=engine_versions.MID_2025)


def test_resolution_without_a_channel_entry_names_the_key():
    found = preflight.resolve_gke_version(
        {"releaseChannelLatestVersion": {"RAPID": "1.36.2-gke.1052000"}, "validMasterVersions": []},
        channel="STABLE", pin="", floors=ACCELERATORS["b200"].gke_floors, location="us-central1",
        pin_key="verl-gke:gkeVersion", channel_key="verl-gke:releaseChannel")
    assert found.version is None and [p.key for p in found.problems] == ["verl-gke:releaseChannel"]


# --- lookups on an empty project ------------------------------------------------------------------


def test_the_lookup_waits_for_the_apis_enabled_in_the_same_run():
    run = _run()
    lookup = next(i for i in run.invokes if i.token == LOOKUP)
    registered_before = [r.type for r in run.resources[:lookup.after]]
    assert registered_before.count(SERVICE) == len(run.of_type(SERVICE)) > 0, "ran before the APIs were enabled"
    cluster_index = next(i for i, r in enumerate(run.resources) if r.type == CLUSTER)
    assert lookup.after <= cluster_index, "the cluster was registered before its version was known"
    # The cluster's version input carries the APIs as dependencies (the gate).
    apis = {r.urn for r in run.of_type(SERVICE)}
    assert apis <= set(run.one(CLUSTER).property_dependencies["minMasterVersion"])


def test_preview_on_an_empty_project_says_the_version_comes_at_deploy_time():
    run = _run(preview=True)  # nothing in state: the APIs are enabled by this very run
    assert not [i for i in run.invokes if i.token == LOOKUP], "the lookup must not run before its API exists"
    assert run.one(CLUSTER).inputs["minMasterVersion"] == mocking.UNKNOWN
    assert "resolved at deploy time from the REGULAR release channel" in run.outputs["gkeVersion"]
    assert "(created by this run)" in run.outputs["nodeServiceAccount"]


def test_preview_with_the_apis_already_on_resolves_and_checks():
    on = frozenset({SERVICE, "verl-gke:apis:ProjectApis"})
    run = _run(preview=True, existing=on)
    assert run.one(CLUSTER).inputs["minMasterVersion"] == _newest("REGULAR")
    result = mocking.Run()
    with pytest.raises(ConfigError, match="verl-gke:releaseChannel"):
        _run(preview=True, existing=on, server_config=engine_versions.BELOW_FLOOR, result=result)
    assert not [r for r in result.resources if r.type in BILLABLE]


def test_plan_prints_the_version_and_the_node_account(capsys, tmp_path):
    assert plan.main(["--stack", "h200", "--out", str(tmp_path / "up")]) == 0
    printed = capsys.readouterr().out
    assert f"GKE version: {_newest('REGULAR')} (the newest version of the REGULAR release channel" in printed
    assert "node service account: verl-h200-nodes@replace-with-your-project-id.iam.gserviceaccount.com" in printed
    assert plan.main(["--stack", "h200", "--out", str(tmp_path / "preview"), "--preview"]) == 0
    printed = capsys.readouterr().out
    assert "GKE version: resolved at deploy time from the REGULAR release channel in europe-west1" in printed
    assert 'minMasterVersion="[unknown]"' in printed


def test_the_mocks_answer_like_the_data_source():
    # terraform-provider-google: a channel's latest is its first valid version with the prefix; the
    # default ignores the prefix; lists keep only matching versions.
    found = engine_versions.lookup(engine_versions.CURRENT, "1.34.")
    assert found["releaseChannelLatestVersion"] == {"REGULAR": "1.34.6-gke.1064000", "STABLE": "1.34.6-gke.1064000"}
    assert found["releaseChannelDefaultVersion"]["RAPID"] == "1.36.1-gke.1180000"
    assert found["latestMasterVersion"] == "1.34.6-gke.1064000"
    assert all(v.startswith("1.34.") for v in found["validMasterVersions"])
    for cfg in (engine_versions.CURRENT, engine_versions.BELOW_FLOOR):
        for ch in cfg["channels"]:  # newest first, as GKE lists them
            keys = [gke.version_key(v) for v in ch["validVersions"]]
            assert keys == sorted(keys, reverse=True) and ch["defaultVersion"] in ch["validVersions"]
            assert set(ch["validVersions"]) <= set(cfg["validMasterVersions"])
