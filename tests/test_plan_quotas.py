"""The plan's quota check against your own quotas (`--quotas FILE`), and what it assumed without them (issue 45
item 7: h200 with 16 nodes failed on "the plan's sample project quotas" with no way to give your own)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.stack_helpers import ROOT, plan_command, plan_in_process
from tools import stack_file

REGION = "europe-west1"  # Pulumi.h200.yaml's
OTHER_REGIONS = ["us-central1", "us-east4", "asia-southeast1"]
GCLOUD = "gcloud beta quotas info list --service=compute.googleapis.com --project=PROJECT --format=json"
EXPECTED = f"expected the JSON list of QuotaInfos that `{GCLOUD} > FILE` saves"


def quota_info(quota_id: str, *rows: tuple[dict, int | None, list[str]], sdk_details: bool = False) -> dict:
    """One QuotaInfo as `gcloud beta quotas info list --format=json` prints it (Cloud Quotas REST: details an
    object, its int64 value a string, left out when 0), or with `details` as the Pulumi SDK's list."""
    def details(value: int | None):
        one = {} if value is None else {"value": str(value)}
        return ([one] if one else []) if sdk_details else one

    return {"name": f"projects/123456789012/locations/global/services/compute.googleapis.com/quotaInfos/{quota_id}",
            "quotaId": quota_id, "service": "compute.googleapis.com", "containerType": "PROJECT",
            "dimensionsInfos": [{"dimensions": d, "details": details(v), "applicableLocations": locs}
                                for d, v, locs in rows]}


def regional(quota_id: str, value: int, sdk_details: bool = False, **dims: str) -> dict:
    """A grant in REGION (its own dimensionsInfo, most specific first), the default elsewhere 0."""
    return quota_info(quota_id, ({**dims, "region": REGION}, value, [REGION]), (dims, None, OTHER_REGIONS),
                      sdk_details=sdk_details)


def granted(sdk_details: bool = False) -> list[dict]:
    """A project granted enough for the h200 stack at 16 GPU nodes (128 H200s), plus a quota it does not use."""
    def worldwide(quota_id: str, value: int) -> dict:
        return quota_info(quota_id, ({}, value, ["global"]), sdk_details=sdk_details)

    return [
        regional("PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region", 128, sdk_details),
        worldwide("GPUS-ALL-REGIONS-per-project", 128),
        regional("CPUS-PER-VM-FAMILY-per-project-region", 200, sdk_details, vm_family="C2"),
        worldwide("CPUS-ALL-REGIONS-per-project", 1000),
        regional("SSD-TOTAL-GB-per-project-region", 4096, sdk_details),
        regional("HYPERDISK-BALANCED-TOTAL-GB-per-project-region", 10000, sdk_details),
        worldwide("NETWORKS-per-project", 15),
        worldwide("FIREWALLS-per-project", 200),
        regional("STATIC-ADDRESSES-per-project-region", 8, sdk_details),
        regional("IN-USE-ADDRESSES-per-project-region", 8, sdk_details),
        regional("PREEMPTIBLE-LOCAL-SSD-GB-per-project-region", 200000, sdk_details),
        regional("NVIDIA-T4-GPUS-per-project-region", 4, sdk_details),
    ]


def h200_file(tmp_path: Path, gpu_nodes: int = 16) -> Path:
    """Pulumi.h200.yaml with `gpuNodes` changed, as a stack file of its own."""
    doc = stack_file.load_yaml((ROOT / "Pulumi.h200.yaml").read_text(), "Pulumi.h200.yaml")
    doc["config"]["verl-gke:gpuNodes"] = gpu_nodes
    path = tmp_path / "Pulumi.big.yaml"
    path.write_text(json.dumps(doc))
    return path


def listing(tmp_path: Path, infos: list[dict]) -> Path:
    path = tmp_path / "quotas.json"
    path.write_text(json.dumps(infos, indent=2))
    return path


def plan_big(tmp_path: Path, *extra: str, run=plan_in_process):
    return run("--stack", "big", "--config", str(h200_file(tmp_path)), "--out", str(tmp_path / "out"), "--quiet",
               *extra)


def test_h200_at_16_nodes_is_refused_on_the_sample_quotas_saying_how_to_give_yours(tmp_path):
    proc = plan_big(tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert ("verl-gke:gpuNodes: quota PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region (region=europe-west1) is 64, "
            "the stack needs 128") in proc.stderr
    assert "(the plan's sample project quotas, tools/mocking.py: check yours with --quotas FILE)" in proc.stderr
    assert f"- --quotas FILE: save your project's quotas with `{GCLOUD} > FILE`" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sdk_details", [False, True], ids=["gcloud-details-object", "sdk-details-list"])
def test_h200_at_16_nodes_passes_with_a_quota_file_that_grants_enough(tmp_path, sdk_details):
    quotas = listing(tmp_path, granted(sdk_details))
    proc = plan_big(tmp_path, "--quotas", str(quotas))
    assert proc.returncode == 0, proc.stderr
    assert f"Quotas checked: {quotas} (--quotas)" in proc.stdout
    assert ("  PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region, region europe-west1: 128; the stack needs 128"
            in proc.stdout)
    assert "sample" not in proc.stdout.split("Quotas checked:")[1].split("hourly price")[0]
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["warnings"] == []


def test_a_short_quota_in_the_file_is_refused_naming_the_file(tmp_path):
    infos = [i for i in granted() if i["quotaId"] != "GPUS-ALL-REGIONS-per-project"]
    quotas = listing(tmp_path, [*infos, quota_info("GPUS-ALL-REGIONS-per-project", ({}, 96, ["global"]))])
    proc = plan_big(tmp_path, "--quotas", str(quotas))
    assert proc.returncode == 2, proc.stderr
    assert ("verl-gke:gpuNodes: quota GPUS-ALL-REGIONS-per-project is 96, the stack needs 128 (16 GPU nodes x 8 "
            "nvidia-h200-141gb, counted in every region)") in proc.stderr
    assert f"(quotas from --quotas {quotas})" in proc.stderr and "sample" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_mocked_program_run_reads_the_files_values_too(tmp_path):
    """The local-SSD shortfall is a warning, which only the program's own check (its quota invokes, answered
    by the mocks) reports: the file's 1000 GB reached it."""
    infos = [i for i in granted() if i["quotaId"] != "PREEMPTIBLE-LOCAL-SSD-GB-per-project-region"]
    quotas = listing(tmp_path, [*infos, regional("PREEMPTIBLE-LOCAL-SSD-GB-per-project-region", 1000)])
    proc = plan_big(tmp_path, "--quotas", str(quotas))
    assert proc.returncode == 0, proc.stderr
    (warning,) = json.loads((tmp_path / "out" / "plan.json").read_text())["warnings"]
    assert warning.startswith("preflight: verl-gke:gpuNodes: quota PREEMPTIBLE-LOCAL-SSD-GB-per-project-region "
                              "(region=europe-west1) is 1000, the stack needs 192000"), warning


def test_a_quota_the_file_lacks_is_a_warning_not_checked_never_a_sample(tmp_path):
    """The samples (64 and 32 GPUs) would refuse 128 GPUs: the two GPU quotas left out are not checked at all."""
    gone = {"PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region", "GPUS-ALL-REGIONS-per-project"}
    quotas = listing(tmp_path, [i for i in granted() if i["quotaId"] not in gone])
    proc = plan_big(tmp_path, "--quotas", str(quotas))
    assert proc.returncode == 0, proc.stderr
    expected = [f"quota PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region (region=europe-west1): not in {quotas}: "
                "not checked", f"quota GPUS-ALL-REGIONS-per-project: not in {quotas}: not checked"]
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["warnings"] == expected
    assert all(f"warning: {w}" in proc.stderr for w in expected)
    assert "could not read quota" not in proc.stderr  # one warning each, not the program's second one
    assert (f"  GPUS-ALL-REGIONS-per-project, global: not in {quotas}: not checked; the stack needs 128"
            in proc.stdout)


def test_without_a_file_the_plan_names_each_sample_value_it_assumed(tmp_path):
    from stacks import config as stack_config
    from stacks import quotas
    from tools import plan

    proc = plan_in_process("--stack", "h200", "--out", str(tmp_path / "out"), "--quiet")
    assert proc.returncode == 0, proc.stderr
    section = proc.stdout.split("Quotas checked: ")[1].split("\nhourly price")[0].splitlines()
    assert section[0] == ("the plan's sample project's (tools/mocking.py), not your project's; check yours with "
                          f"--quotas FILE, FILE saved by `{GCLOUD}`")
    assert {"  PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region, region europe-west1: 64 (sample); the stack needs 16",
            "  GPUS-ALL-REGIONS-per-project, global: 32 (sample); the stack needs 16",
            "  CPUS-PER-VM-FAMILY-per-project-region vm_family=C2, region europe-west1: 200 (sample); the stack "
            "needs 80"} <= set(section)
    raw, secret_keys = plan.read_stack_file(ROOT / "Pulumi.h200.yaml", "h200")
    wanted = quotas.needs(stack_config.load(raw, "h200", allow_placeholder_project=True, secret_keys=secret_keys))
    assert [line.split()[0].rstrip(",") for line in section[1:]] == [n.ref.quota_id for n in wanted]
    assert all("(sample); the stack needs" in line for line in section[1:])


# --- a file that is not a QuotaInfo listing: exit 2 naming --quotas and what it expects, nothing written --------

def _info(**changes) -> dict:
    return {**quota_info("GPUS-ALL-REGIONS-per-project", ({}, 128, ["global"])), **changes}


def _dims_info(**changes) -> list[dict]:
    return [_info(dimensionsInfos=[{"dimensions": {}, "details": {"value": "128"}, "applicableLocations": ["global"],
                                    **changes}])]


MALFORMED = {
    "not-utf8": (b"\xff\xfe[]", "not UTF-8 text"),
    "empty": (b"", "not JSON (Expecting value at line 1 column 1)"),
    "not-json": (b"quotaId: X\n", "not JSON"),
    "nan": (b'[{"quotaId": "X", "dimensionsInfos": [{"details": {"value": NaN}}]}]', "not JSON (NaN"),
    "rest-list-response": ({"quotaInfos": [_info()]}, "the top level: expected a list of QuotaInfo objects"),
    "no-quota-info": ([], "lists no QuotaInfo"),
    "item-not-an-object": ([1], "[0]: expected a QuotaInfo object, got 1"),
    "no-quota-id": ([{"dimensionsInfos": []}], "[0].quotaId: expected the quota's id"),
    "other-service": ([_info(service="storage.googleapis.com")],
                      "[0] (GPUS-ALL-REGIONS-per-project).service: expected 'compute.googleapis.com'"),
    "listed-twice": ([_info(), _info()], "[1] (GPUS-ALL-REGIONS-per-project): the quota is listed twice"),
    "dimensions-infos-not-a-list": ([_info(dimensionsInfos={})], ".dimensionsInfos: expected a list, got an object"),
    "dimensions-not-strings": (_dims_info(dimensions={"region": 1}), ".dimensions: expected an object of strings"),
    "locations-not-a-list": (_dims_info(applicableLocations="global"), ".applicableLocations: expected a list"),
    "value-not-a-number": (_dims_info(details={"value": "lots"}), '.details.value: expected an integer '
                           '(a number or a string of digits), got "lots"'),
    "value-a-fraction": (_dims_info(details={"value": 1.5}), ".details.value: expected an integer"),
    "value-a-boolean": (_dims_info(details={"value": True}), ".details.value: expected an integer"),
    "value-non-ascii-digits": (_dims_info(details={"value": "١٢٨"}), ".details.value: expected an integer"),
    "two-details": (_dims_info(details=[{"value": "1"}, {"value": "2"}]), ".details: expected one QuotaDetails"),
}


def _refused(proc, out: Path, path: Path, what: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert f"error: --quotas {path}: " in proc.stderr and what in proc.stderr, proc.stderr
    assert EXPECTED in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_file_that_is_not_a_quota_listing_exits_2_naming_quotas(case, tmp_path):
    content, what = MALFORMED[case]
    path = tmp_path / "quotas.json"
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    _refused(plan_big(tmp_path, "--quotas", str(path)), tmp_path / "out", path, what)


def test_a_missing_quota_file_exits_2_naming_quotas(tmp_path):
    path = tmp_path / "nowhere.json"
    _refused(plan_big(tmp_path, "--quotas", str(path)), tmp_path / "out", path, "no such file")


def test_a_folder_as_the_quota_file_exits_2_naming_quotas(tmp_path):
    _refused(plan_big(tmp_path, "--quotas", str(tmp_path)), tmp_path / "out", tmp_path, "is a folder")


def test_a_quota_file_the_system_cannot_open_exits_2_naming_quotas(tmp_path):
    path = listing(tmp_path, granted()) / "inside"  # a file as a folder: refused for any user, root included
    _refused(plan_big(tmp_path, "--quotas", str(path)), tmp_path / "out", path, "cannot be read (Not a directory)")


def test_a_quota_file_over_the_size_cap_exits_2_unread(tmp_path):
    from tools import quota_source

    path = tmp_path / "huge.json"
    with path.open("wb") as f:  # sparse: nothing is written, nothing must be read
        f.truncate(quota_source.MAX_BYTES + 1)
    _refused(plan_big(tmp_path, "--quotas", str(path)), tmp_path / "out", path,
             "is 16,777,217 bytes, over the 16,777,216 the plan reads")


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_fifo_or_device_as_the_quota_file_exits_2_without_waiting_or_reading(special, tmp_path):
    """The real command (a hang or an endless read would show as plan_command's time limit)."""
    path = Path(special)
    if special == "fifo":
        path = tmp_path / "quotas.fifo"
        os.mkfifo(path)
    proc = plan_big(tmp_path, "--quotas", str(path), run=plan_command)
    _refused(proc, tmp_path / "out", path, "is not a regular file (a FIFO, a device or a socket)")


def test_a_quota_id_with_terminal_codes_is_shown_escaped_and_cut(tmp_path):
    """A quota id is text from the file: shown in the refusal, it must not clear the screen or retitle the window."""
    path = tmp_path / "quotas.json"
    hostile = "\x1b[2J\x1b]0;owned\x07\u202eX" + "Y" * 500
    path.write_text(json.dumps([_info(quotaId=hostile, service="storage.googleapis.com")]))
    proc = plan_big(tmp_path, "--quotas", str(path))
    _refused(proc, tmp_path / "out", path, "[0] (\\x1b[2J\\x1b]0;owned\\x07\\u202eXYYY")
    assert not any(c in proc.stderr for c in "\x1b\x07\u202e") and "Y" * 200 not in proc.stderr
