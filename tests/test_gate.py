"""The one validation gate: every rule a component enforces on a config-derived value is enforced by
`stacks.config.load()` first, with the same implementation (catalog.naming, catalog.capacity).

For each rule, a stack file that breaks it exits 2 from the offline plan (naming the key, writing
nothing) and, run as `pulumi up` runs the program, registers zero resources. A meta-test reads the
components' source for the rules they call, so a rule added to a component without a case here fails.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pulumi
import pytest
import yaml

from catalog.naming import MAX_BUCKET_PREFIX
from stacks import compose
from tools import mocking, plan
from tools.plan import ROOT

BASE = {"gcp:project": "gate-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b"}

# rule id -> (config that breaks it, the key the error must name). Rule ids: the catalog function a
# component calls ("naming.<fn>", "capacity.problems", "accelerators.<fn>") or a component's own
# check on a config-derived value ("<component>.<check>").
GATE_CASES: dict[str, list[tuple[dict[str, object], str]]] = {
    "naming.zone_in_region_problem": [({"gcp:zone": "europe-west4-a"}, "gcp:zone")],
    "naming.zone_problem": [({"gcp:zone": "us-central1"}, "gcp:zone")],
    "naming.project_id_problem": [({"gcp:project": "Bad_Project"}, "gcp:project"),
                                  ({"gcp:project": ""}, "gcp:project")],
    "storage.location": [({"gcp:region": ""}, "gcp:region")],
    "naming.bucket_prefix_problem": [({"verl-gke:namePrefix": "goog-x"}, "verl-gke:namePrefix"),
                             ({"verl-gke:namePrefix": "my-google"}, "verl-gke:namePrefix")],
    "naming.bucket_name_problem": [({"verl-gke:bucketName": "g00gle-data"}, "verl-gke:bucketName")],
    "naming.namespace_problem": [({"verl-gke:namespace": "kube-verl"}, "verl-gke:namespace"),
                         ({"verl-gke:namespace": "gke-x"}, "verl-gke:namespace")],
    "naming.dns_label_problem": [({"verl-gke:namespace": "Verl"}, "verl-gke:namespace")],
    "naming.dns_1035_label_problem": [({"verl-gke:namePrefix": "9verl"}, "verl-gke:namePrefix")],
    "naming.dns_subdomain_problem": [({"verl-gke:namePrefix": "verl_x"}, "verl-gke:namePrefix")],
    "accelerators.foreign_accelerator_problem": [
        ({"verl-gke:accelerator": "h200", "verl-gke:namePrefix": "verl-b200"}, "verl-gke:namePrefix")],
    "capacity.problems": [({"verl-gke:capacity": "preemptible"}, "verl-gke:capacity"),
                          ({"verl-gke:capacity": "reservation"}, "verl-gke:reservation"),
                          ({"verl-gke:capacity": "spot", "verl-gke:reservation": "r1"}, "verl-gke:reservation")],
    "cluster.rdma_nics": [({"verl-gke:rdmaCidrs": [f"192.168.{i}.0/24" for i in range(1, 8)]},
                           "verl-gke:rdmaCidrs")],
    "cluster.gpu_nodes": [({"verl-gke:gpuNodes": 0}, "verl-gke:gpuNodes")],
    "cluster.location": [({"verl-gke:clusterMode": "autopilot", "verl-gke:zonalCluster": True},
                          "verl-gke:zonalCluster")],
    "ray_cluster.head_cpu": [({"verl-gke:rayHeadCpu": 0}, "verl-gke:rayHeadCpu"),
                             ({"verl-gke:cpuMachineType": "e2-standard-8"}, "verl-gke:cpuMachineType")],
    "ray_cluster.network_annotations": [({"verl-gke:accelerator": "l4", "verl-gke:model": "Qwen/Qwen2.5-0.5B-Instruct",
                                          "verl-gke:rdmaCidrs": ["192.168.1.0/24"]}, "verl-gke:rdmaCidrs")],
    "ray_cluster.worker_size": [({"verl-gke:accelerator": "l4", "verl-gke:clusterMode": "autopilot",
                                  "verl-gke:model": "Qwen/Qwen2.5-0.5B-Instruct"}, "verl-gke:clusterMode")],
    "naming.image_ref_problem": [({"verl-gke:image": "verlai/verl"}, "verl-gke:image")],
    "naming.model_id_problem": [({"verl-gke:model": "qwen"}, "verl-gke:model")],
    "naming.git_ref_problem": [({"verl-gke:verlVersion": "v0.6.1..x"}, "verl-gke:verlVersion")],
    "naming.ray_version_problem": [({"verl-gke:rayVersion": "latest"}, "verl-gke:rayVersion")],
    # namePrefix's own rule (DNS-1035, <= 20) implies a valid "<prefix>-nodes"; the case still breaks both.
    "naming.service_account_id_problem": [({"verl-gke:namePrefix": "Nodes"}, "verl-gke:namePrefix")],
    "naming.soft_delete_days_problem": [({"verl-gke:bucketSoftDeleteDays": 3}, "verl-gke:bucketSoftDeleteDays")],
    "naming.billing_account_id_problem": [({"verl-gke:billingAccount": "my-account", "verl-gke:budgetMonthly": 500},
                                   "verl-gke:billingAccount")],
}
# Rules components enforce on values no config key reaches (constants of the component or of compose).
NOT_CONFIG_DERIVED = {
    "naming.secret_key_problem": "Secret data keys are component defaults (hf_api_token)",
    "naming.repo_url_problem": "the verl repository URL is a pin (catalog.versions.VERL_REPO)",
    "naming.positive_quantity_problem": "the staging Job's requests are component defaults",
    "naming.quantity": "parses the component's own quantities",
    "naming.env_var_problem": "secret env var names are fixed by compose (WANDB_API_KEY)",
}


def _cases() -> list[tuple[str, dict[str, object], str]]:
    return [(rule, overrides, key) for rule, cases in GATE_CASES.items() for overrides, key in cases]


def _stack_file(tmp_path: Path, overrides: dict[str, object]) -> Path:
    config = {**BASE, **overrides}
    path = tmp_path / "Pulumi.gate.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


@pytest.mark.parametrize("rule,overrides,key", _cases(), ids=[f"{c[0]}-{i}" for i, c in enumerate(_cases())])
def test_plan_refuses_with_exit_2(rule, overrides, key, tmp_path, capsys):
    out = tmp_path / "out"
    code = plan.main(["--stack", "gate", "--config", str(_stack_file(tmp_path, overrides)), "--out", str(out),
                      "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert key in err, err
    assert "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("rule,overrides,key", _cases(), ids=[f"{c[0]}-{i}" for i, c in enumerate(_cases())])
def test_program_registers_nothing(rule, overrides, key):
    # As the CLI hands config over: strings, lists and numbers as JSON.
    raw = {k: v if isinstance(v, str) else json.dumps(v) for k, v in {**BASE, **overrides}.items()}
    seen = mocking.Run()
    with pytest.raises(pulumi.RunError) as err:
        mocking.run(compose.program, raw, "gate", result=seen)
    assert key in str(err.value)
    assert seen.resources == [], "a config the gate refuses must register nothing"


def _rules_called_by_components() -> set[str]:
    rules: set[str] = set()
    for path in sorted((ROOT / "components").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "naming":
                if node.attr[0].islower():
                    rules.add(f"naming.{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr == "problems":
                rules.add("capacity.problems")
            elif isinstance(node, ast.Name) and node.id == "foreign_accelerator_problem":
                rules.add("accelerators.foreign_accelerator_problem")
    return rules


def test_every_component_rule_has_a_gate_case():
    called = _rules_called_by_components()
    assert called, "the scan found no rules: the meta-test itself is broken"
    missing = called - set(GATE_CASES) - set(NOT_CONFIG_DERIVED)
    assert not missing, f"rules components enforce with no gate case here: {sorted(missing)}"


def test_bucket_prefix_limit_is_the_components():
    # The gate's namePrefix bound leaves room for "-data" within the storage component's bucket prefix.
    from stacks.keys import MAX_PREFIX

    assert MAX_PREFIX + len("-data") <= MAX_BUCKET_PREFIX


# --- the key table: every bound and choice a row holds is what the gate enforces ---------------------------

def _refused(key: str, value: str) -> list[str]:
    from stacks import config

    with pytest.raises(config.ConfigError) as err:
        config.load({**BASE, config.KEYS_BY_NAME[key].full: value}, "b200")
    return [p for p in err.value.problems if p.startswith(config.KEYS_BY_NAME[key].full + " = ")]


def _table_cases() -> list[tuple[str, str, str]]:
    """(key, a value just outside its row, what the message must say) for each bound and choice."""
    from stacks.keys import KEYS

    cases = []
    for k in KEYS:
        if k.type == "integer":
            cases.append((k.name, str(k.maximum + 1), f"must be at most {k.maximum} ({k.why})"))
            if k.minimum is not None:
                cases.append((k.name, str(k.minimum - 1), f"must be an integer >= {k.minimum}"))
        elif k.number:
            bracket = "(" if k.open_minimum else "["
            allowed = f"must be a number in {bracket}{k.minimum}, {k.maximum}]"
            cases.append((k.name, str(k.maximum * 2 + 1), allowed))
            cases.append((k.name, str(k.minimum if k.open_minimum else k.minimum - 1), allowed))
        elif k.choices:
            cases.append((k.name, "not-a-choice", "must be one of " + ", ".join(k.choices)))
    return cases


@pytest.mark.parametrize("key,value,allowed", _table_cases(), ids=lambda v: str(v)[:40])
def test_the_gate_enforces_each_row_of_the_key_table(key, value, allowed):
    """The gate reads each key through its row (stacks.keys): the message names the key and what it allows."""
    named = _refused(key, value)
    assert any(allowed in p for p in named), (allowed, named)


def test_catalog_facts_in_descriptions_come_from_the_catalog():
    """A new accelerator or capacity type shows in Pulumi.yaml without anyone retyping it."""
    from catalog.accelerators import ACCELERATORS
    from catalog.capacity import CAPACITIES
    from stacks.keys import KEYS_BY_NAME

    text = {name: KEYS_BY_NAME[name].description for name in ("accelerator", "gpuNodes", "capacity")}
    for acc in ACCELERATORS.values():
        assert acc.key in text["accelerator"] and acc.machine_type in text["accelerator"], acc.key
        assert f"{acc.gpus_per_node} " in text["gpuNodes"] and acc.key in text["gpuNodes"], acc.key
    assert all(c in text["capacity"] for c in CAPACITIES)
    assert tuple(KEYS_BY_NAME["accelerator"].choices) == tuple(ACCELERATORS)
    assert KEYS_BY_NAME["capacity"].choices == CAPACITIES


@pytest.mark.parametrize("train", ["examples/no-such/train.parquet", "README.md"])
def test_own_data_that_cannot_be_read_is_refused_without_gsm8k_bounds(train):
    """A stack's own dataTrainFile that is missing or unreadable is refused for that file, before any resource;
    its batch is not held to GSM8K's 7,473 rows (the stack does not train on GSM8K)."""
    from stacks import config

    raw = {**BASE, config.KEYS_BY_NAME["dataTrainFile"].full: train,
           config.KEYS_BY_NAME["dataValFile"].full: "examples/word_reverse/val.parquet",
           config.KEYS_BY_NAME["grpoTrainBatchSize"].full: "8000"}
    with pytest.raises(config.ConfigError) as err:
        config.load(raw, "b200")
    assert any(p.startswith(config.KEYS_BY_NAME["dataTrainFile"].full) for p in err.value.problems), err.value.problems
    assert not any("GSM8K" in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("key,allowed", [("grpoTrainBatchSize", "from 1 to the run's training rows (7473 for GSM8K)"),
                                         ("grpoPpoMiniBatchSize", "from 0 to the run's training rows"),
                                         ("grpoPpoMicroBatchSizePerGpu", "from 1 to a full batch's samples")])
def test_a_batch_key_that_is_no_integer_names_its_real_bound(key, allowed):
    """The row's maximum (10^10) is only a typo guard: a batch is bounded by the run's rows."""
    named = _refused(key, "abc")
    assert any(f"must be an integer {allowed}" in p for p in named), named


# --- secrets: a key set with --secret that the program cannot keep secret ----------------------------------------

def test_a_secret_key_the_program_cannot_keep_is_refused_and_registers_nothing():
    """`pulumi config set --secret namePrefix ...` marks the key secret; its value would reach resource names in
    plain text. The gate refuses it (the real CLI's case: tests/test_cli_loading.py), never showing the value."""
    raw = {**BASE, "verl-gke:namePrefix": "Not_A_Valid_Prefix"}
    seen = mocking.Run()
    with pytest.raises(pulumi.RunError) as err:
        mocking.run(compose.program, raw, "gate", ["verl-gke:namePrefix"], result=seen)
    assert "verl-gke:namePrefix is set as a secret (--secret), which the program cannot keep" in str(err.value)
    assert "Not_A_Valid_Prefix" not in str(err.value) and seen.resources == []


def test_the_secret_keys_pass_as_secrets():
    from stacks import config

    cfg = config.load({**BASE, "verl-gke:hfToken": "hf_x", "verl-gke:wandbApiKey": "k"}, "gate",
                      secret_keys=["verl-gke:hfToken", "verl-gke:wandbApiKey"])
    assert cfg.has_hf_token and cfg.has_wandb_key


# --- node fit: a pod that would stay Pending on its Standard node is refused by the gate ------------------

def test_a_ray_head_larger_than_its_cpu_node_leaves_is_refused_naming_ray_head_cpu():
    """The dev stack's e2-standard-8 leaves 6.91 CPU after GKE's reservations and DaemonSets; a 7-CPU head
    (7.25 with its GCS FUSE sidecar) would pend: `pulumi up` must refuse it as the plan does."""
    from stacks import config

    raw, secret_keys = plan.read_stack_file(ROOT / "Pulumi.dev.yaml", "dev")
    with pytest.raises(config.ConfigError) as err:
        config.load({**raw, "verl-gke:rayHeadCpu": "7"}, "dev", allow_placeholder_project=True,
                    secret_keys=secret_keys)
    assert [p for p in err.value.problems if p.startswith("verl-gke:rayHeadCpu = 7: ") and "leaves 6.91" in p], \
        err.value.problems
