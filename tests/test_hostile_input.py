"""Hostile input to the offline plan: broken stack files, bad values, odd stack names and output folders.

Every case must exit 2, name the key or argument, print no traceback, write nothing and register no
resource. Cases run the plan in-process (`tools.plan.main`); a handful run it as a user does, in a
subprocess, to prove the exit code and the absence of a traceback end to end.
"""

from __future__ import annotations

import ast
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from catalog.problems import MAX_LINES, Problem
from stacks import config as stack_config
from stacks import key_values
from tests.stack_helpers import ROOT, STACK_FILES, count_program_runs, plan_command, plan_in_process
from tools import plan

GOOD = {  # Pulumi.b200.yaml's values, as YAML text
    "gcp:project": "replace-with-your-project-id",
    "gcp:region": "us-central1",
    "gcp:zone": "us-central1-b",
    "verl-gke:accelerator": "b200",
    "verl-gke:clusterMode": "autopilot",
    "verl-gke:gpuNodes": "2",
    "verl-gke:capacity": "spot",
    "verl-gke:namePrefix": "verl-b200",
    "verl-gke:model": "Qwen/Qwen2.5-32B-Instruct",
}
POSITION = re.compile(r"Pulumi\.hostile\.yaml:\d+:\d+: ")


def stack_text(**changes: str | None) -> str:
    """The good stack file with some keys changed (YAML text), added, or removed (None)."""
    values = dict(GOOD)
    for key, text in changes.items():
        if text is None:
            values.pop(key, None)
        else:
            values[key] = text
    return "config:\n" + "".join(f"  {k}: {v}\n" for k, v in values.items())


def yaml_case(key: str, text: str) -> str:
    return stack_text(**{key: text})


def alias_bomb(levels: int, width: int) -> str:
    """`levels` anchors, each a list of `width` aliases of the one before (a billion-laughs file)."""
    lines = ["  verl-gke:lol0: &a0 [lol]\n"]
    for i in range(1, levels):
        lines.append(f"  verl-gke:lol{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]\n")
    return stack_text() + "".join(lines)


def merge_bomb(levels: int, width: int) -> str:
    """The same growth through merge keys (`<<`) of mappings."""
    lines = ["  verl-gke:m0: &m0 {a: 1, b: 2, c: 3}\n"]
    for i in range(1, levels):
        refs = ", ".join(f"k{j}: *m{i - 1}" for j in range(width))
        lines.append(f"  verl-gke:m{i}: &m{i} {{<<: *m{i - 1}, {refs}}}\n")
    return stack_text() + "".join(lines)


def nested(depth: int, kind: str) -> str:
    if kind == "flow-list":
        value = "[" * depth + "x" + "]" * depth
        return yaml_case("verl-gke:grpoExtraOverrides", value)
    if kind == "flow-map":
        return yaml_case("verl-gke:grpoExtraOverrides", "{a: " * depth + "x" + "}" * depth)
    # block sequences, one more indent per level
    body = "".join("  " * (i + 2) + "-\n" for i in range(depth - 1)) + "  " * (depth + 1) + "- x\n"
    return stack_text() + "  verl-gke:grpoExtraOverrides:\n" + body


# (case id, stack file text or bytes, text the error must contain: the key or what is wrong)
BAD_FILES: list[tuple[str, str | bytes, str]] = [
    # --- not YAML, or not the shape of a stack file: file:line:column, or the shape expected
    ("unclosed-bracket", "config:\n  verl-gke:rdmaCidrs: [192.168.1.0/24, 192.168.2.0/24\n", "invalid YAML"),
    ("tab-indent", "config:\n\tgcp:project: my-project-1\n", "invalid YAML"),
    ("unclosed-quote", "config:\n  gcp:region: 'us-central1\n", "invalid YAML"),
    ("bad-indent", "config:\n  gcp:region: us-central1\n   gcp:zone: us-central1-b\n", "invalid YAML"),
    ("undefined-alias", "config:\n  gcp:region: *nowhere\n", "invalid YAML"),
    ("duplicate-key", stack_text() + "  gcp:region: europe-west4\n", "already defined at line"),
    ("top-level-list", "- config\n- gcp:project\n", "must be a mapping at the top level"),
    ("top-level-scalar", "just some text\n", "must be a mapping at the top level"),
    ("config-list", "config:\n  - gcp:project: p\n", "'config' must be a mapping"),
    ("config-string", "config: gcp:project=p\n", "'config' must be a mapping"),
    ("non-string-key", "config:\n  1: one\n", "could not parse 1 as a configuration key"),
    ("non-string-top-key", "4: config\n", "unknown top-level field 4"),
    ("non-string-key-among-keys", stack_text() + "  true: yes\n", "could not parse"),
    ("three-colons", "config:\n  a:b:c:d: x\n", "a:b:c:d"),
    ("colliding-keys", stack_text(gpuNodes="3"), "both mean 'verl-gke:gpuNodes'"),
    ("top-level-typo", "confg:\n  gcp:project: my-project-1\n", "did you mean 'config'"),
    ("infinite-number", yaml_case("verl-gke:gpuNodes", ".inf"), "verl-gke:gpuNodes"),
    ("not-utf8", b"config:\n  gcp:region: \xff\xfe\n", "not valid UTF-8"),
    # review 26: PyYAML's reader raised ReaderError before parsing (a traceback); yaml.v3 refuses these too
    ("nul-byte", "config:\n  gcp:project: my\x00project\n", "control character U+0000"),
    ("control-char-in-list", stack_text() + "  verl-gke:rdmaCidrs: [\x01]\n", "Pulumi.hostile.yaml:11:24:"),
    ("escape-char", yaml_case("verl-gke:model", "Qwen/\x1b[2Jx"), "control character U+001B"),
    ("esc-environment", "environment:\n  - my-env\n" + stack_text(), "environment"),
    # --- required keys empty or missing (they count as missing)
    ("empty-region", yaml_case("gcp:region", "''"), "gcp:region is not set"),
    ("empty-project", yaml_case("gcp:project", "''"), "gcp:project is not set"),
    ("blank-zone", yaml_case("gcp:zone", "'   '"), "gcp:zone is not set"),
    ("null-region", yaml_case("gcp:region", "~"), "gcp:region is not set"),
    ("missing-zone", stack_text(**{"gcp:zone": None}), "gcp:zone is not set"),
    ("empty-file", "", "gcp:project is not set"),
    # --- values the Pulumi CLI hands over differently from a YAML 1.1 reader
    ("yes-is-a-string", yaml_case("verl-gke:deletionProtection", "yes"), "verl-gke:deletionProtection"),
    ("on-is-a-string", yaml_case("verl-gke:bucketDeleteOnDestroy", "on"), "verl-gke:bucketDeleteOnDestroy"),
    ("quoted-True", yaml_case("verl-gke:submitJob", "'True'"), "verl-gke:submitJob"),
    ("one-is-not-true", yaml_case("verl-gke:jobWaitForCompletion", "1"), "verl-gke:jobWaitForCompletion"),
    ("upper-TRUE-quoted", yaml_case("verl-gke:grpoValBeforeTrain", '"TRUE"'), "verl-gke:grpoValBeforeTrain"),
    ("unnamespaced-read", stack_text(**{"verl-gke:gpuNodes": None, "gpuNodes": "0"}), "verl-gke:gpuNodes = 0"),
    ("config-segment-key", stack_text(**{"verl-gke:gpuNodes": None, "verl-gke:config:gpuNodes": "0"}),
     "verl-gke:gpuNodes = 0"),
    ("float-count", yaml_case("verl-gke:gpuNodes", "4.5"), "verl-gke:gpuNodes"),
    ("underscore-count", yaml_case("verl-gke:gpuNodes", "'1_000'"), "verl-gke:gpuNodes"),
    ("list-count", yaml_case("verl-gke:gpuNodes", "[2]"), "verl-gke:gpuNodes"),
    ("negative-count", yaml_case("verl-gke:gpuNodes", "-1"), "verl-gke:gpuNodes"),
    # --- every count has an upper bound
    ("gpu-nodes-1e20", yaml_case("verl-gke:gpuNodes", "100000000000000000000"), "verl-gke:gpuNodes"),
    ("gpu-nodes-1001", yaml_case("verl-gke:gpuNodes", "1001"), "at most 1000"),
    ("cpu-nodes-max", yaml_case("verl-gke:cpuNodesMax", "100000"), "verl-gke:cpuNodesMax"),
    ("cpu-nodes-min", yaml_case("verl-gke:cpuNodesMin", "5000"), "verl-gke:cpuNodesMin"),
    ("ready-timeout", yaml_case("verl-gke:jobReadyTimeoutMinutes", "99999999"), "verl-gke:jobReadyTimeoutMinutes"),
    ("completion-timeout", yaml_case("verl-gke:jobCompletionTimeoutMinutes", "0"),
     "verl-gke:jobCompletionTimeoutMinutes"),
    ("rollout-n", yaml_case("verl-gke:grpoRolloutN", "100000"), "verl-gke:grpoRolloutN"),
    ("prompt-length", yaml_case("verl-gke:grpoMaxPromptLength", "1000000"), "verl-gke:grpoMaxPromptLength"),
    ("tensor-parallel", yaml_case("verl-gke:grpoTensorParallelSize", "16"), "verl-gke:grpoTensorParallelSize"),
    ("epochs", yaml_case("verl-gke:grpoTotalEpochs", "1000000000"), "verl-gke:grpoTotalEpochs"),
    ("save-freq", yaml_case("verl-gke:grpoSaveFreq", "1000000000000"), "verl-gke:grpoSaveFreq"),
    ("mtu-high", yaml_case("verl-gke:mtu", "9000"), "verl-gke:mtu"),
    ("mtu-low", yaml_case("verl-gke:mtu", "100"), "verl-gke:mtu"),
    # --- bucketLocation and the region it defaults to: Cloud Storage's locations
    ("bucket-location-typo", yaml_case("verl-gke:bucketLocation", "us-central9"), "did you mean us-central1"),
    ("bucket-location-mars", yaml_case("verl-gke:bucketLocation", "mars"), "verl-gke:bucketLocation"),
    ("bucket-location-list", yaml_case("verl-gke:bucketLocation", "[US]"), "verl-gke:bucketLocation"),
    ("region-not-a-location", stack_text(**{"gcp:region": "moon-west1", "gcp:zone": "moon-west1-a"}),
     "gcp:region"),
    # --- unknown keys in our namespace: did you mean
    ("typo-namespaced", yaml_case("verl-gke:gpuNode", "2"), "did you mean verl-gke:gpuNodes"),
    ("typo-unnamespaced", yaml_case("gpunodes", "2"), "did you mean verl-gke:gpuNodes"),
    ("typo-namespace", yaml_case("verl_gke:gpuNodes", "2"), "did you mean verl-gke:gpuNodes"),
    ("unknown-key", yaml_case("verl-gke:colour", "blue"), "verl-gke:colour is not a known key"),
    # --- unknown keys in the Google provider's namespace (catalog.gcp_provider): did you mean, not "is not set"
    ("typo-gcp-region", stack_text(**{"gcp:region": None, "gcp:regoin": "us-central1"}),
     "error: Pulumi.hostile.yaml: invalid stack configuration:\n  - gcp:regoin is not a key the Google provider reads: "
     "did you mean gcp:region?\n  - gcp:region is not set"),
    ("typo-gcp-provider-key", yaml_case("gcp:impersonateServiceAcount", "sa@p.iam.gserviceaccount.com"),
     "gcp:impersonateServiceAcount is not a key the Google provider reads: did you mean "
     "gcp:impersonateServiceAccount?"),
    # --- other values
    ("accelerator", yaml_case("verl-gke:accelerator", "a100"), "verl-gke:accelerator"),
    ("mode-object", yaml_case("verl-gke:clusterMode", "{a: 1}"), "verl-gke:clusterMode"),
    ("empty-prefix", yaml_case("verl-gke:namePrefix", "''"), "verl-gke:namePrefix"),
    ("kube-namespace", yaml_case("verl-gke:namespace", "kube-system"), "verl-gke:namespace"),
    ("rdma-not-a-list", yaml_case("verl-gke:rdmaCidrs", "192.168.1.0/24"), "verl-gke:rdmaCidrs"),
    ("rdma-numbers", yaml_case("verl-gke:rdmaCidrs", "[1, 2]"), "verl-gke:rdmaCidrs"),
    ("learning-rate", yaml_case("verl-gke:grpoLearningRate", "fast"), "verl-gke:grpoLearningRate"),
    ("empty-image", yaml_case("verl-gke:image", "''"), "verl-gke:image"),
    ("empty-model", yaml_case("verl-gke:model", "''"), "verl-gke:model"),
    ("channel", yaml_case("verl-gke:releaseChannel", "nightly"), "verl-gke:releaseChannel"),
    ("reservation-missing", yaml_case("verl-gke:capacity", "reservation"), "verl-gke:reservation"),
    ("gke-version", yaml_case("verl-gke:gkeVersion", "1.2"), "verl-gke:gkeVersion"),
    # --- YAML resource bombs: refused beyond tools.stack_file.MAX_VALUES values expanded ("excessive aliasing");
    # a smaller one, which yaml.v3 refuses by its share of aliases, reaches the gate and is refused by its keys
    ("alias-bomb-9x9", alias_bomb(9, 9), "excessive aliasing"),
    ("alias-bomb-5x10", alias_bomb(5, 10), "verl-gke:lol4 is not a known key"),
    ("alias-bomb-30x2", alias_bomb(30, 2), "excessive aliasing"),
    ("alias-bomb-3x100", alias_bomb(3, 100), "verl-gke:lol2 is not a known key"),
    ("merge-key-bomb", merge_bomb(8, 8), "excessive aliasing"),
    # --- nesting: beyond 100 levels refused (tools.stack_file.MAX_DEPTH; yaml.v3 allows 10,000), never a
    # RecursionError
    ("deep-list-800", nested(800, "flow-list"), "nested deeper than 100 levels"),
    ("deep-list-20000", nested(20000, "flow-list"), "nested deeper than 100 levels"),
    ("deep-map-150", nested(150, "flow-map"), "nested deeper than 100 levels"),
    ("deep-block-120", nested(120, "block"), "nested deeper than 100 levels"),
    ("deep-through-aliases", stack_text() + "  verl-gke:d: &d " + "[" * 60 + "y" + "]" * 60 + "\n"
     + "  verl-gke:e: " + "[" * 60 + "*d" + "]" * 60 + "\n", "nested deeper than 100 levels (aliases expanded)"),
    # --- values of declared type the Pulumi CLI refuses (pkg/workspace/config.go), with its reason
    ("overrides-as-string", yaml_case("verl-gke:grpoExtraOverrides", "trainer.total_epochs=1"),
     "pulumi config set --path 'grpoExtraOverrides[0]'"),
    ("overrides-as-json-string", yaml_case("verl-gke:grpoExtraOverrides", "'[\"trainer.total_epochs=1\"]'"),
     "must be of type 'array<string>'"),
    ("logger-as-string", yaml_case("verl-gke:grpoLogger", "console"), "must be of type 'array<string>'"),
    ("rdma-list-of-lists", yaml_case("verl-gke:rdmaCidrs", "[[10.0.0.0/24]]"), "must be of type 'array<string>'"),
    ("count-trailing-newline", yaml_case("verl-gke:gpuNodes", '"2\\n"'), "must be of type 'integer'"),
    ("count-as-quoted-float", yaml_case("verl-gke:gpuNodes", "'2.0'"), "must be of type 'integer'"),
    ("bool-as-list", yaml_case("verl-gke:submitJob", "[true]"), "must be of type 'boolean'"),
    ("string-as-map", yaml_case("verl-gke:model", "{name: x}"), "must be of type 'string'"),
]

# Pulumi.dev.yaml's values (L4, Standard, zonal), as YAML text
DEV = {k: json.dumps(v) if isinstance(v, str) else str(v)
       for k, v in yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"].items()}
PINS = {"verl-gke:grpoTensorParallelSize": "1", "verl-gke:grpoPpoMaxTokenLenPerGpu": "4096",
        "verl-gke:grpoLogProbMaxTokenLenPerGpu": "4096"}  # what the gate asks for a model outside the catalog


def dev_text(**changes: str | None) -> str:
    values = {**DEV, **{k: v for k, v in changes.items() if v is not None}}
    return "config:\n" + "".join(f"  {k}: {v}\n" for k, v in values.items() if changes.get(k, "") is not None)


def overrides_case(*items: str) -> str:
    return yaml_case("verl-gke:grpoExtraOverrides", "[" + ", ".join(json.dumps(i) for i in items) + "]")


# Issue 26: configs the gate passed that then crashed the program, values GCP or the CLI would not take,
# secrets by other roads, messages. Every one: exit 2, the key named, no traceback, nothing written.
BAD_FILES += [
    # --- the components' own rules, run by the gate (stacks.component_rules), and the sample quotas
    ("uncatalogued-model-cache", dev_text(**{"verl-gke:model": "someone/big-model", **PINS}),
     "verl-gke:model: RayClusterArgs.file_cache_gib"),
    ("model-dotdot", dev_text(**{"verl-gke:model": "Qwen/..", **PINS}), "verl-gke:model"),
    ("model-dot", yaml_case("verl-gke:model", "Qwen/."), "verl-gke:model"),
    ("model-double-dash", yaml_case("verl-gke:model", "Qwen/a--b"), "the Hub refuses '--'"),
    ("quota-gpus", dev_text(**{"verl-gke:gpuNodes": "16"}), "verl-gke:gpuNodes: quota"),
    ("quota-cpus", dev_text(**{"verl-gke:cpuMachineType": "c2-standard-16", "verl-gke:cpuNodesMax": "100"}),
     "verl-gke:cpuNodesMax: quota"),
    ("quota-all-regions", stack_text(**{"verl-gke:gpuNodes": "8", "verl-gke:grpoTrainBatchSize": "512"}),
     "GPUS-ALL-REGIONS"),
    # review 26: the program's GKE version preflight raised its error (traceback, exit 1) on a pin the
    # gate's shape check took; the gate now runs that check on the plan's sample versions
    ("gke-minor-not-offered", dev_text(**{"verl-gke:gkeVersion": '"1.99"'}), "offers no 1.99.x version"),
    ("gke-minor-leading-zero", yaml_case("verl-gke:gkeVersion", '"01.33"'), "verl-gke:gkeVersion"),
    ("gke-patch-not-offered", yaml_case("verl-gke:gkeVersion", "1.33.5-gke.1000"), "is not a version GKE offers"),
    # review 26: image references containerd refuses (distribution/reference grammar), or reads as a host
    ("image-capital-path", yaml_case("verl-gke:image", "verlai/Verl:vllm011.latest"), "verl-gke:image"),
    ("image-capital-account", yaml_case("verl-gke:image", "Verlai/verl:vllm011.latest"), "registry host"),
    ("image-two-tags", yaml_case("verl-gke:image", "verlai/verl:a:b"), "verl-gke:image"),
    ("image-double-dot", yaml_case("verl-gke:image", "verlai..x/verl:a"), "verl-gke:image"),
    ("image-tag-129", yaml_case("verl-gke:image", "verlai/verl:" + "t" * 129), "verl-gke:image"),
    ("image-short-digest", yaml_case("verl-gke:image", "verlai/verl@sha256:abc"), "verl-gke:image"),
    # --- numbers: finite, and the CLI's integer syntax
    ("nan-learning-rate", yaml_case("verl-gke:grpoLearningRate", '"nan"'), "verl-gke:grpoLearningRate = 'nan'"),
    ("inf-learning-rate", yaml_case("verl-gke:grpoLearningRate", '"inf"'), "must be a finite number"),
    ("minus-inf-kl", yaml_case("verl-gke:grpoKlLossCoef", '"-Infinity"'), "verl-gke:grpoKlLossCoef"),
    ("nan-memory-utilization", yaml_case("verl-gke:grpoGpuMemoryUtilization", '"NaN"'),
     "verl-gke:grpoGpuMemoryUtilization"),
    ("integer-trailing-newline", yaml_case("verl-gke:gpuNodes", '"2\\n"'), "verl-gke:gpuNodes"),
    ("integer-leading-newline", yaml_case("verl-gke:rayHeadCpu", '"\\n4"'), "verl-gke:rayHeadCpu"),
    ("project-trailing-newline", yaml_case("gcp:project", '"my-project-1\\n"'), "gcp:project"),
    ("region-trailing-space", yaml_case("gcp:region", '"us-central1 "'), "gcp:region"),
    # --- subnets GCP refuses (VPC "Valid IPv4 ranges" / "Prohibited IPv4 subnet ranges")
    ("cidr-loopback", yaml_case("verl-gke:primaryCidr", "127.0.0.0/20"), "loopback"),
    ("cidr-link-local", yaml_case("verl-gke:servicesCidr", "169.254.0.0/20"), "link-local"),
    ("cidr-this-network", yaml_case("verl-gke:podsCidr", "0.0.0.0/14"), "the current network"),
    ("cidr-multicast", yaml_case("verl-gke:gvnicCidr", "224.0.1.0/24"), "multicast"),
    ("cidr-broadcast", yaml_case("verl-gke:gvnicCidr", "255.255.255.0/24"), "verl-gke:gvnicCidr"),
    ("cidr-google-vip", yaml_case("verl-gke:primaryCidr", "199.36.153.0/24"), "Private Google Access"),
    ("cidr-public", yaml_case("verl-gke:primaryCidr", "8.8.8.0/24"), "public range"),
    # review 26: a bare address (GKE API CidrBlock: "must be specified in CIDR notation")
    ("authorized-bare-address", yaml_case("verl-gke:masterAuthorizedNetworks", "[203.0.113.7]"),
     "must be in CIDR notation: write 203.0.113.7/32"),
    # --- zones: must exist and offer the accelerator (catalog/zones.py)
    ("zone-without-a4", yaml_case("gcp:zone", "us-central1-a"), "offers no a4-highgpu-8g"),
    ("zone-that-does-not-exist", yaml_case("gcp:zone", "us-central1-z"), "gcp:zone = 'us-central1-z'"),
    ("zone-without-a3-ultra", stack_text(**{"verl-gke:accelerator": "h200", "verl-gke:namePrefix": "verl-h200",
                                            "gcp:zone": "us-central1-c"}), "offers no a3-ultragpu-8g"),
    ("zone-without-l4", dev_text(**{"gcp:region": "us-south1", "gcp:zone": "us-south1-a"}),
     "offers no g2-standard-24"),
    ("zone-override-other-zone", yaml_case("verl-gke:zoneOffersAccelerator", "us-central1-a"),
     "verl-gke:zoneOffersAccelerator"),
    # --- namespaces nothing reads
    ("namespace-verl", yaml_case("verl:gpuNodes", "4"), "namespace 'verl'"),
    ("namespace-kubernetes", yaml_case("kubernetes:context", "my-cluster"), "namespace 'kubernetes'"),
    ("namespace-random", yaml_case("random:seed", "1"), "namespace 'random'"),
    ("namespace-aws", yaml_case("aws:region", "us-east-1"), "namespace 'aws'"),
    # --- the Ray head against the CPU machine's allocatable (CPU and memory, with its sidecar)
    ("head-memory", dev_text(**{"verl-gke:rayHeadMemoryGib": "30"}), "verl-gke:rayHeadMemoryGib = 30"),
    ("head-memory-small-machine", dev_text(**{"verl-gke:cpuMachineType": "e2-standard-4",
                                              "verl-gke:rayHeadMemoryGib": "14"}), "verl-gke:cpuMachineType"),
    ("head-cpu-highcpu", dev_text(**{"verl-gke:cpuMachineType": "n1-highcpu-16", "verl-gke:rayHeadMemoryGib": "14"}),
     "leaves 10.31 to pods"),
    ("head-cpu-allocatable", dev_text(**{"verl-gke:cpuMachineType": "e2-standard-4",
                                         "verl-gke:rayHeadCpu": "2", "verl-gke:rayHeadMemoryGib": "4"}), "ok"),
    # --- secrets by other roads: resolvers and credential shapes in the overrides
    ("override-oc-env", overrides_case("trainer.run_note=${oc.env:WANDB_API_KEY}"), "${oc.env:...}"),
    ("override-env-spaced", overrides_case("+trainer.note=${ oc.env : HF_TOKEN }"), "verl-gke:grpoExtraOverrides"),
    ("override-legacy-env", overrides_case("+trainer.note=${env:HOME}"), "${env:...}"),
    ("override-decode", overrides_case('+trainer.note=${oc.decode:"${oc.env:HOME}"}'), "${oc.decode:...}"),
    ("override-wandb-key", overrides_case("+trainer.note=0123456789abcdef0123456789abcdef01234567"),
     "W&B API key"),
    ("override-hf-token", overrides_case("+trainer.note=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
     "Hugging Face token"),
    ("override-interpolated-resolver",
     overrides_case("+trainer.r=oc.env", "+trainer.note=${${trainer.r}:WANDB_API_KEY}"),
     "uses the resolver ${${trainer.r}:...}"),
    ("override-half-interpolated-resolver",
     overrides_case("+trainer.e=env", "+trainer.note=${oc.${trainer.e}:HF_TOKEN}"),
     "verl-gke:grpoExtraOverrides: trainer.note uses the resolver"),
    # review 26: a secret key holding a list/map (undeclared in Pulumi.yaml, so the CLI takes any shape and
    # the program would send its JSON text as the token), and a secret's own value typed into an override
    ("secret-as-list", yaml_case("verl-gke:hfToken", "[hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789]"),
     "verl-gke:hfToken = [secret]: must be one string, not a list or map"),
    ("secret-as-map", yaml_case("verl-gke:wandbApiKey", "{key: abc}"),
     "verl-gke:wandbApiKey = [secret]: must be one string, not a list or map"),
    ("override-carries-the-secret",
     stack_text(**{"verl-gke:hfToken": "my-own-odd-token-1234",
                   "verl-gke:grpoExtraOverrides": '["+trainer.note=my-own-odd-token-1234"]'}),
     "carries the value of the secret verl-gke:hfToken"),
    # review 26: a malformed max_num_seqs was read as the default by the memory model and sent to vLLM as is
    ("override-max-num-seqs-hex", overrides_case("actor_rollout_ref.rollout.max_num_seqs=0x10"),
     "max_num_seqs='0x10' must be an integer >= 1"),
    ("override-max-num-seqs-zero", overrides_case("actor_rollout_ref.rollout.max_num_seqs=0"), "max_num_seqs='0'"),
    ("override-private-key", overrides_case("+trainer.note=-----BEGIN RSA PRIVATE KEY-----"), "private key"),
    # --- messages: exact characters, short
    ("key-zero-width", yaml_case("verl-gke:gpuNodes\u200b", "2"), "'verl-gke:gpuNodes\\u200b'"),
    ("key-trailing-space", yaml_case('"verl-gke:gpuNodes "', "2"), "'verl-gke:gpuNodes '"),
    ("key-nbsp", yaml_case("verl-gke:gpu\u00a0Nodes", "2"), "'verl-gke:gpu\\xa0Nodes'"),
]
# "head-cpu-allocatable" fits (2 + 0.25 CPU of the 2.92 an e2-standard-4 leaves after its DaemonSets): it is
# the control of the three above.
BAD_FILES = [c for c in BAD_FILES if c[0] != "head-cpu-allocatable"]

# (case id, argv after the stack file's --config, text the error must contain)
BAD_ARGS: list[tuple[str, list[str], str]] = [
    ("stack-empty", ["--stack", ""], "--stack ''"),
    ("stack-space-bang", ["--stack", "b200 prod!"], "invalid character ' '"),
    ("stack-parent", ["--stack", "../../stacks"], "--stack '../../stacks'"),
    ("stack-deep-parent", ["--stack", "../../../../../../../../tmp/x"], "--stack '../../"),
    ("stack-absolute", ["--stack", "/nonexistent-verl-gke-test"], "--stack '/nonexistent-verl-gke-test'"),
    ("stack-too-long", ["--stack", "s" * 101], "cannot exceed 100"),
    ("stack-nul", ["--stack", "a\x00b"], "invalid character"),
    ("stack-unicode", ["--stack", "prod\u00e9"], "invalid character"),
    ("stack-backslash", ["--stack", "..\\..\\x"], "invalid character"),
    ("unknown-argument", ["--stack", "hostile", "--stacks", "b200"], "--stacks"),
]


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A stack file, an output folder that must stay absent, a default plan root, and a resource count."""
    registered = count_program_runs(monkeypatch, tmp_path)
    # These cases probe deletion: should the plan ever regress, it must fail the test, never delete a
    # real folder (an old plan run with `--stack /etc` once replaced a machine's /etc with its output).
    inside = tmp_path.resolve()

    def guard(path) -> None:
        if not Path(path).resolve().is_relative_to(inside):
            raise AssertionError(f"the plan tried to delete {path}, outside the test's folder")

    real_rmtree, real_unlink = shutil.rmtree, Path.unlink
    monkeypatch.setattr(shutil, "rmtree", lambda path, *a, **k: (guard(path), real_rmtree(path, *a, **k))[1])
    monkeypatch.setattr(Path, "unlink", lambda self, *a, **k: (guard(self), real_unlink(self, *a, **k))[1])
    return tmp_path, registered


def run_main(argv: list[str]) -> tuple[int, str]:
    """The plan command in-process: (exit status, what it printed on stdout and stderr)."""
    proc = plan_in_process(*argv)
    return proc.returncode, proc.stdout + proc.stderr


def assert_refused(rc: int, text: str, named: str, tmp_path: Path, registered: list[int]) -> None:
    assert rc == 2, text
    assert named in text, text
    assert "Traceback" not in text
    assert registered == [], "a refused plan must not run the program"
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert written == ["Pulumi.hostile.yaml"], f"a refused plan wrote {written}"


def write_stack(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "Pulumi.hostile.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize("content,named", [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_bad_stack_file(sandbox, content, named):
    tmp_path, registered = sandbox
    path = write_stack(tmp_path, content)
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out")])
    assert_refused(rc, text, named, tmp_path, registered)


@pytest.mark.parametrize("argv,named", [c[1:] for c in BAD_ARGS], ids=[c[0] for c in BAD_ARGS])
def test_bad_invocation(sandbox, argv, named):
    tmp_path, registered = sandbox
    path = write_stack(tmp_path, stack_text())
    rc, text = run_main([*argv, "--config", str(path)])
    assert_refused(rc, text, named, tmp_path, registered)


def test_gcp_provider_keys_are_the_installed_sdks():
    """catalog.gcp_provider lists what the Google provider reads: pulumi_gcp/config/vars.py's __config__.get* names."""
    import importlib.util

    from catalog.gcp_provider import GCP_PROVIDER_KEYS

    path = Path(importlib.util.find_spec("pulumi_gcp").origin).parent / "config" / "vars.py"
    read = {n.args[0].value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute) and getattr(n.func.value, "id", "") == "__config__" and n.args}
    assert read and GCP_PROVIDER_KEYS == read, (sorted(read - GCP_PROVIDER_KEYS), sorted(GCP_PROVIDER_KEYS - read))


def test_a_real_provider_key_is_not_a_typo():
    raw = {**{k: v for k, v in GOOD.items()}, "gcp:impersonateServiceAccount": "sa@p.iam.gserviceaccount.com",
           "gcp:billingProject": "other-project-1"}
    assert key_values.unknown_key_problems(raw) == []


def test_a_key_a_newer_google_provider_reads_is_not_a_typo(tmp_path, monkeypatch):
    """requirements.txt allows any pulumi-gcp 10.x and `pulumi install` takes the newest: a key its vars.py reads
    that catalog.gcp_provider (written from 10.2.0) does not list yet must still load, and a typo still fail."""
    import importlib.util
    import types

    from catalog import gcp_provider

    package = tmp_path / "pulumi_gcp"
    (package / "config").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "config" / "vars.py").write_text(
        "class _ExportableConfig:\n    @property\n    def new_service_custom_endpoint(self):\n"
        "        return __config__.get('newServiceCustomEndpoint')\n")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: types.SimpleNamespace(
        origin=str(package / "__init__.py")) if name == "pulumi_gcp" else real(name, *a))
    gcp_provider.installed_keys.cache_clear()
    try:
        assert key_values.unknown_key_problems({**GOOD, "gcp:newServiceCustomEndpoint": "https://x/"}) == []
        assert key_values.unknown_key_problems({**GOOD, "gcp:regoin": "us-central1"})
    finally:
        monkeypatch.undo()
        gcp_provider.installed_keys.cache_clear()


def test_every_count_has_an_upper_bound():
    unbounded = [k.name for k in stack_config.KEYS if k.type == "integer" and (k.maximum is None or not k.why)]
    assert unbounded == []


def test_table_is_large_enough():
    assert len(BAD_FILES) + len(BAD_ARGS) + len(BAD_OUT) >= 60


def test_yaml_errors_carry_file_line_and_column(sandbox):
    tmp_path, _ = sandbox
    for content in (BAD_FILES[0][1], BAD_FILES[1][1]):
        path = write_stack(tmp_path, content)
        _, text = run_main(["--stack", "hostile", "--config", str(path)])
        assert POSITION.search(text), text


# --- the output folder: the plan never deletes or writes outside its own folder --------------------


def _bad_out(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Output folders the plan must refuse, each prepared with content that must survive."""
    user = tmp_path / "users-folder"
    (user / "keep").mkdir(parents=True)
    (user / "keep" / "notes.txt").write_text("mine")
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / plan.MARKER).write_text("x")
    link = tmp_path / "link-to-marked"
    link.symlink_to(marked)
    fake = tmp_path / "fake-marker"
    fake.mkdir()
    (fake / "notes.txt").write_text("mine")
    (fake / plan.MARKER).symlink_to(a_file)
    return {
        "non-empty-unmarked": (user, "holds no .verl-gke-plan marker"),
        "a-file": (a_file, "is not a folder"),
        "symlink": (link, "symbolic link"),
        "symlinked-marker": (fake, "holds no .verl-gke-plan marker"),
        "the-project": (ROOT, "is the project or a folder holding it"),
        "above-the-project": (ROOT.parent, "is the project or a folder holding it"),
        "filesystem-root": (Path("/"), "is the project or a folder holding it"),
    }


BAD_OUT = ["non-empty-unmarked", "a-file", "symlink", "symlinked-marker", "the-project", "above-the-project",
           "filesystem-root"]


def _tree(path: Path) -> dict[str, str]:
    return {p.relative_to(path).as_posix(): (p.read_text() if p.is_file() else "")
            for p in sorted(path.rglob("*")) if not p.is_symlink()}


@pytest.mark.parametrize("case", BAD_OUT)
def test_bad_output_folder(sandbox, case):
    tmp_path, registered = sandbox
    out, named = _bad_out(tmp_path)[case]
    path = write_stack(tmp_path, stack_text())
    before = _tree(tmp_path)
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(out)])
    assert rc == 2 and named in text and f"--out {out}" in text and "Traceback" not in text, text
    assert registered == [] and _tree(tmp_path) == before


def test_plan_clears_only_its_own_folder(sandbox):
    tmp_path, registered = sandbox
    path = write_stack(tmp_path, stack_text())
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("mine")
    out = tmp_path / "out"
    out.mkdir()  # an empty folder the user made is fine
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(out), "--quiet"])
    assert rc == 0, text
    assert (out / plan.MARKER).is_file() and (out / "plan.json").is_file() and registered and registered[0] > 0
    # someone plants a link to a folder of theirs in the plan's folder: the re-run unlinks it, never follows it
    (out / "manifests" / "escape").symlink_to(victim)
    (out / "stale.json").write_text("{}")
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(out), "--quiet"])
    assert rc == 0, text
    assert (victim / "precious.txt").read_text() == "mine"
    assert not (out / "stale.json").exists() and not (out / "manifests" / "escape").exists()
    assert (out / "plan.json").is_file()


@pytest.mark.parametrize("stack", [".", "..", "a.b", "a_b"])
def test_dot_names_are_legal_but_never_a_path(sandbox, stack):
    """Pulumi accepts `.` and `..` as stack names: the default folder is derived, never the name itself."""
    tmp_path, _ = sandbox
    path = write_stack(tmp_path, stack_text())
    rc, text = run_main(["--stack", stack, "--config", str(path), "--quiet"])
    assert rc == 0, text
    written = plan.PLAN_ROOT / plan.folder_name(stack)
    assert (written / "plan.json").is_file()
    assert [p.name for p in plan.PLAN_ROOT.iterdir()] == [written.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Pulumi.hostile.yaml", "build"]
    assert written.name not in (".", "..") and "/" not in written.name


def test_folder_names_do_not_collide():
    names = [".", "..", "...", "a.b", "a_b", "a-b", "b200"]
    folders = [plan.folder_name(n) for n in names]
    assert len(set(folders)) == len(names) and plan.folder_name("b200") == "b200"
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", f) for f in folders)


# --- values the CLI would deliver: read as Pulumi reads them -----------------------------------------


def test_unnamespaced_key_is_the_projects(tmp_path):
    path = write_stack(tmp_path, stack_text(**{"verl-gke:gpuNodes": None, "gpuNodes": "4"}))
    raw, _ = plan.read_stack_file(path)
    assert raw["verl-gke:gpuNodes"] == "4"
    assert stack_config.load(raw, "hostile", allow_placeholder_project=True).gpu_nodes == 4


def test_cli_value_forms_are_accepted(tmp_path):
    """What the CLI turns into valid strings is valid here too: 0x10 is 16, TRUE is true, 4.0 is 4."""
    path = write_stack(tmp_path, stack_text(**{"verl-gke:cpuNodesMax": "0x10", "verl-gke:deletionProtection": "TRUE",
                                               "verl-gke:gpuNodes": "4.0", "verl-gke:bucketLocation": "EU"}))
    raw, _ = plan.read_stack_file(path)
    cfg = stack_config.load(raw, "hostile", allow_placeholder_project=True)
    assert (cfg.cluster.cpu_nodes_max, cfg.cluster.deletion_protection, cfg.gpu_nodes) == (16, True, 4)
    assert cfg.bucket_location == "EU"


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_good_stacks_still_pass(sandbox, path):
    tmp_path, registered = sandbox
    stack = path.stem.split(".", 1)[1]
    rc, text = run_main(["--stack", stack, "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 0, text
    assert registered and registered[0] > 0


# --- end to end, as a user runs it: the exit code and no traceback ----------------------------------


@pytest.mark.parametrize("case", ["unclosed-bracket", "tab-indent", "top-level-list", "config-list",
                                  "yes-is-a-string"])
def test_end_to_end_exit_2_without_traceback(tmp_path, case):
    content, named = next((c[1], c[2]) for c in BAD_FILES if c[0] == case)
    path = write_stack(tmp_path, content)
    proc = plan_command("--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and named in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout and not (tmp_path / "out").exists()


def test_stack_name_never_reaches_outside_the_project(tmp_path):
    """`--stack ../../stacks` run twice once deleted the project's own stacks/ package."""
    before = sorted(p.name for p in (ROOT / "stacks").iterdir())
    for _ in range(2):
        proc = plan_command("--stack", "../../stacks")
        assert proc.returncode == 2 and "--stack '../../stacks'" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (ROOT / "stacks").iterdir()) == before


def test_the_sandbox_refuses_to_delete_outside_its_folder(sandbox):
    other = Path(tempfile.mkdtemp(prefix="not-the-plans-"))
    keep = other / "keep.txt"
    keep.write_text("keep")
    try:
        with pytest.raises(AssertionError, match="outside the test's folder"):
            shutil.rmtree(other)
        with pytest.raises(AssertionError, match="outside the test's folder"):
            keep.unlink()
        assert keep.read_text() == "keep"
    finally:
        os.remove(keep)
        os.rmdir(other)


# --- the shell's PULUMI_CONFIG* variables: the plan ignores them, and says so ------------------------

SHELL_CONFIG = {
    "pulumi-config-json": {"PULUMI_CONFIG": '{"verl-gke:gpuNodes": "4", "verl-gke:hfToken": "hf_from_the_shell"}'},
    "pulumi-config-zero": {"PULUMI_CONFIG": "0"},
    "pulumi-config-not-json": {"PULUMI_CONFIG": "gpuNodes=4"},
    "pulumi-config-key": {"PULUMI_CONFIG_VERL_GKE_HFTOKEN": "hf_from_the_shell"},
    "pulumi-config-secret-keys": {"PULUMI_CONFIG_SECRET_KEYS": '["verl-gke:model"]'},
    "all-at-once": {"PULUMI_CONFIG": '{"verl-gke:gpuNodes": "0"}', "PULUMI_CONFIG_VERL_GKE_GPUNODES": "9",
                    "PULUMI_CONFIG_SECRET_KEYS": "[]"},
}


def _plan_json(out: Path) -> dict:
    import json

    data = json.loads((out / "plan.json").read_text())
    for r in data["resources"]:
        r["dependsOn"] = sorted(r["dependsOn"])
    return data


@pytest.mark.parametrize("case", list(SHELL_CONFIG))
def test_shell_config_variables_are_ignored(sandbox, monkeypatch, case):
    tmp_path, _ = sandbox
    path = write_stack(tmp_path, stack_text())
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "plain"), "--quiet"])
    assert rc == 0, text
    for name, value in SHELL_CONFIG[case].items():
        monkeypatch.setenv(name, value)
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "env"), "--quiet"])
    assert rc == 0 and "Traceback" not in text, text
    assert f"note: ignoring {', '.join(sorted(SHELL_CONFIG[case]))} from the shell" in text
    assert "hf_from_the_shell" not in text
    assert _plan_json(tmp_path / "env") == _plan_json(tmp_path / "plain")  # resources, sizing, price: the file's


# --- issue 26: nothing written before the gate passes; the figures of an uncatalogued model ----------


def test_uncatalogued_model_plans_and_prices_without_a_traceback(sandbox):
    """b200 with a model outside the catalog and the pins the gate asks for: the plan completes (the sizing
    once raised after plan.json was written)."""
    tmp_path, registered = sandbox
    pins = {k: v for k, v in PINS.items()}
    path = write_stack(tmp_path, stack_text(**{"verl-gke:model": "someone/uncatalogued-7b", **pins}))
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    assert rc == 0 and "Traceback" not in text, text
    assert "run estimate: someone/uncatalogued-7b is not in catalog/models.py" in text
    assert (tmp_path / "out" / "plan.json").is_file()


def test_a_program_preflight_the_gate_misses_is_exit_2(sandbox, monkeypatch):
    """Backstop: a preflight ConfigError raised inside the program (here the GKE version check, with the gate's
    copy of it switched off) is exit 2 with its message, no traceback, nothing written."""
    tmp_path, _ = sandbox
    monkeypatch.setattr(plan, "gke_version_problems", lambda cfg: [])
    path = write_stack(tmp_path, dev_text(**{"verl-gke:gkeVersion": '"1.99"'}))
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out")])
    assert rc == 2 and "verl-gke:gkeVersion" in text and "Traceback" not in text, text
    assert not (tmp_path / "out").exists()


def test_a_failure_after_the_gate_writes_nothing(sandbox, monkeypatch):
    """Every figure is computed before the first file is written: should one ever raise, no plan file exists."""
    tmp_path, _ = sandbox
    monkeypatch.setattr(plan, "price_report", lambda cfg, *run: (_ for _ in ()).throw(ValueError("boom")))
    path = write_stack(tmp_path, stack_text())
    with pytest.raises(ValueError, match="boom"):
        plan.main(["--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    assert not (tmp_path / "out").exists()


# --- issue 26: names that become paths and commands ----------------------------------------------------

STACK_NAMES = [".", "..", "...", "-x", "--", "-", "_", "a.b", "-.", "..-", "x" * 100]


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_every_cli_stack_name_stays_in_its_folder(stack):
    """Each path built from the stack name is normalised and stays under its mount: `..` once put the
    checkpoints at /checkpoints/../<model>, on the pod's own disk."""
    from catalog.paths import CHECKPOINT_MOUNT, MOUNT, bucket_paths
    from tools import stack_file

    stack_file.validate_stack_name(stack)  # the CLI accepts it
    paths = bucket_paths(stack, "Qwen/Qwen2.5-0.5B-Instruct", "v0.6.1")
    for field, base in (("checkpoint_dir", CHECKPOINT_MOUNT), ("tensorboard_dir", MOUNT + "/tensorboard"),
                        ("merged_dir", MOUNT + "/merged")):
        value = getattr(paths, field)
        assert posixpath.normpath(value) == value and value.startswith(base + "/"), (field, value)
        # exactly one folder for the stack between the base and the model's two
        assert value.endswith("/Qwen/Qwen2.5-0.5B-Instruct") and value.count("/") == base.count("/") + 3, value


def test_existing_stacks_keep_their_checkpoint_folders():
    """Only `.` and `..` move: every other stack's checkpoints stay where they are."""
    from catalog.paths import bucket_paths

    for stack in ("b200", "h200", "dev", "dev-b200", "...", "-x"):
        assert bucket_paths(stack, "m/x", "v1").checkpoint_dir == f"/checkpoints/{stack}/m/x"


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_watch_command_reads_back_the_stack_name(stack, monkeypatch):
    """The generated watchCommand, split as a shell does and parsed by tools.watch, names the same stack."""
    from stacks.compose import watch_command
    from tools import watch

    words = shlex.split(watch_command(stack))
    assert words[:3] == ["venv/bin/python", "-m", "tools.watch"]
    seen: list[str] = []

    def outputs(name, cwd=None):
        seen.append(name)
        raise watch.RayJobError("offline")

    monkeypatch.setattr(watch, "stack_outputs", outputs)
    assert watch.main(words[3:] + ["--once"]) == 2
    assert seen == [stack]


def test_dash_stack_plans_with_safe_commands(sandbox):
    """A stack named `-x`: the plan runs and every command it exports keeps the name an argument."""
    tmp_path, _ = sandbox
    path = write_stack(tmp_path, stack_text())
    rc, text = run_main(["--stack=-x", "--config", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    assert rc == 0, text
    outputs = json.loads((tmp_path / "out" / "plan.json").read_text())["outputs"]
    assert outputs["watchCommand"] == "venv/bin/python -m tools.watch --stack=-x"


def test_destroy_order_tool_refuses_a_path_as_stack(capsys):
    from tools import destroy

    assert destroy.main(["--stack", "../../etc/passwd"]) == 2
    assert "--stack '../../etc/passwd'" in capsys.readouterr().err


@pytest.mark.parametrize("content,named", [
    (None, "no such stack file"),
    ("config:\n  gcp:region: 'us-central1\n", "invalid YAML"),
    ("config:\n  verl-gke:gpuNodes: two\n", "verl-gke:gpuNodes"),
    ("DEV-GKE-1.99", "offers no 1.99.x version"),
], ids=["missing", "bad-yaml", "bad-value", "gke-version"])
def test_destroy_order_tool_refuses_bad_stacks_without_a_traceback(tmp_path, monkeypatch, capsys, content, named):
    """Review 26: tools.destroy ended in a traceback (exit 1) on every config the plan refuses, and took a
    missing stack file for an empty one ("gcp:region is not set")."""
    from tools import destroy

    monkeypatch.setattr(plan, "ROOT", tmp_path)
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")  # the project file the stack file joins
    if content == "DEV-GKE-1.99":
        content = dev_text(**{"verl-gke:gkeVersion": '"1.99"'})
    if content is not None:
        (tmp_path / "Pulumi.hostile.yaml").write_text(content)
    assert destroy.main(["--stack", "hostile"]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err, err


# --- issue 26: secrets by other roads --------------------------------------------------------------------


RESOLVER_PROBES = ["${oc.env:CANARY_26}", "${ oc.env:CANARY_26}", "${oc.env: CANARY_26 }", "${env:CANARY_26}",
                   '${oc.decode:"${oc.env:CANARY_26}"}', "prefix-${oc.env:CANARY_26}-suffix", "${a.b}", "plain",
                   "$${oc.env:CANARY_26}",
                   # review 26: a resolver name built from interpolations (another override sets `r`, `e`)
                   "${${r}:CANARY_26}", "${oc.${e}:CANARY_26}", "${ ${r} : CANARY_26}", "x${${r}:CANARY_26}y",
                   '${oc.decode:"${${r}:CANARY_26}"}']


@pytest.mark.parametrize("value", RESOLVER_PROBES)
def test_overrides_that_omegaconf_resolves_from_the_environment_are_refused(value, monkeypatch):
    """OmegaConf itself is the oracle: any override value whose resolution reads the environment is refused."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from recipe import grpo

    monkeypatch.setenv("CANARY_26", "canary-value-26")
    try:
        cfg = {"a": {"b": "x"}, "r": "oc.env", "e": "env", "v": value}
        resolved = OmegaConf.to_container(OmegaConf.create(cfg), resolve=True)["v"]
    except OmegaConfBaseException:  # e.g. `env` is no longer registered in this OmegaConf
        resolved = ""
    _, problems = grpo._parse_extras((f"+trainer.note={value}",))
    if "canary-value-26" in str(resolved):
        assert problems and "resolver" in str(problems[0]), (value, problems)


@pytest.mark.parametrize("item", ["+actor_rollout_ref.model.revision=0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
                                  "+trainer.git_sha=0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"])
def test_a_commit_id_under_a_commit_key_is_not_a_wandb_key(item):
    """Review 26 (false positive): a Hub revision or git SHA is 40 hex characters, a W&B key's shape; under
    a key that names a commit it is taken. The same value under any other key is still refused."""
    from recipe import grpo

    assert grpo._parse_extras((item,))[1] == []
    other = "+trainer.note=" + item.split("=", 1)[1]
    assert "W&B API key" in str(grpo._parse_extras((other,))[1][0])


def test_the_resolver_check_is_linear_in_the_override_length():
    """Review 26: a scan per `${` made 16,000 of them (32 KB) take 45 s (quadratic); one pass now. Run in a
    subprocess whose generous limit only turns a hang into a failure (no timing is asserted)."""
    code = ("from catalog import secret_shapes as s; "
            "assert s.resolver_problem('${' * 200000 + 'a:b') is not None; "
            "assert s.resolver_problem('${' * 200000) is None")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


def test_one_character_secret_does_not_mangle_the_plan(tmp_path):
    """hfToken '-', handed over decrypted (as `pulumi up` hands a secret): the plan redacts the value where it is the
    whole value, and leaves every other '-' (us-central1, verl-b200-ray) alone."""
    path = write_stack(tmp_path, stack_text(**{"verl-gke:hfToken": "'-'"}))
    raw, _ = plan.read_stack_file(path, "hostile")
    data = plan.build_plan("hostile", raw, ["verl-gke:hfToken"])
    assert data["outputs"]["rayCluster"] == "verl-b200-ray"
    assert "us-central1" in json.dumps(data)


@pytest.mark.parametrize("case", ["secret-as-list", "override-carries-the-secret"])
def test_secret_problems_never_show_the_secret(sandbox, case):
    tmp_path, _ = sandbox
    content = next(c[1] for c in BAD_FILES if c[0] == case)
    path = write_stack(tmp_path, content)
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out")])
    assert rc == 2 and "AbCdEfGhIj" not in text and "my-own-odd-token" not in text, text


def test_redaction_is_by_value_and_finds_long_secrets_inside_text():
    secret = "hf_" + "A" * 34
    data = {"a": "-", "b": ["x-y", "-"], "c": f"token={secret};", "d": {"e": secret}, "f": "us-central1"}
    assert plan.scrub(data, ["-", secret]) == {"a": "[secret]", "b": ["x-y", "[secret]"], "c": "token=[secret];",
                                              "d": {"e": "[secret]"}, "f": "us-central1"}


# --- issue 26: tools.watch --png writes only its own regular files ----------------------------------------


def _png_cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    doc = tmp_path / "notes.png"
    doc.write_text("not an image, mine")
    link = tmp_path / "link.png"
    link.symlink_to(doc)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    return {
        "device": (Path("/dev/null"), "not a regular file"),
        "folder": (folder, "not a regular file"),
        "foreign-file": (doc, "not a PNG image"),
        "symlink": (link, "symbolic link"),
        "missing-folder": (tmp_path / "nowhere" / "s.png", "does not exist"),
        "folder-is-a-file": (blocker / "s.png", "does not exist"),
    }


@pytest.mark.parametrize("case", ["device", "folder", "foreign-file", "symlink", "missing-folder",
                                  "folder-is-a-file"])
def test_watch_png_refuses_what_it_must_not_write(tmp_path, capsys, case):
    from tools import watch

    target, named = _png_cases(tmp_path)[case]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()}
    rc = watch.main(["--address", "http://127.0.0.1:9", "--job", "j", "--once", "--png", str(target)])
    text = capsys.readouterr().out
    assert rc == 2 and named in text and f"--png {target}" in text and "Traceback" not in text, text
    assert {p: p.read_bytes() for p in before} == before
    assert Path("/dev/null").is_char_device()


@pytest.mark.parametrize("job_id", ["../../etc/x", "/tmp/abs", "..", "a/b", "verl-grpo-b200-0123abcd-r2", ""])
def test_watch_default_png_is_one_file_in_its_folder(job_id):
    """Review 26: without --png the file was `<job id>-scores.png`, and the id is whatever the Ray head
    lists (any submitter picks it): `../../etc/x` wrote outside the folder."""
    from tools import watch

    png = watch.default_png(job_id)
    assert png.parent == watch.PNG_DIR and png.name.endswith("-scores.png") and not png.name.startswith("."), png
    if job_id.startswith("verl-grpo"):
        assert png.name == f"{job_id}-scores.png"  # ids this project makes keep their name


def test_watch_png_replaces_its_own_png_through_a_file_of_its_own(tmp_path):
    """The plot writes a temp file it created, then renames it over the target: a PNG of an earlier run is
    replaced, and nothing else is left behind."""
    from tools import watch

    target = tmp_path / "scores.png"
    target.write_bytes(watch.PNG_SIGNATURE + b"old")
    progress = watch.Progress()
    progress.metrics = {1: {watch.TRAIN_SCORE: 0.1}, 2: {watch.TRAIN_SCORE: 0.3}}
    assert watch.plot(progress, target, "t")
    assert target.read_bytes().startswith(watch.PNG_SIGNATURE) and len(target.read_bytes()) > 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.png"]
    os.remove(target)
    target.mkdir()  # between two polls the target became a folder: a clear error, the folder untouched
    with pytest.raises(watch.PngPathError, match="not a regular file"):
        watch.plot(progress, target, "t")
    assert target.is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["scores.png"]


# --- issue 26: the supervisor checks its state before training ----------------------------------------------

SUPERVISE = ROOT / "components" / "scripts" / "supervise.py"


def _supervise(state: Path, run: str = "run-x") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SUPERVISE), "--run-id", run, "--max-recoveries", "3",
                           "--state", str(state), "--expected-gpus", "0", "--dashboard", "http://127.0.0.1:9",
                           "--", sys.executable, "-c", "open('TRAINED', 'w')"],
                          capture_output=True, text=True, timeout=120, cwd=state.parent if state.parent.is_dir()
                          else None)


@pytest.mark.parametrize("content,named", [
    ('{"run": "run-x", "attempts": []}', "unexpected shape"),
    ('{"run": "run-x", "attempts": {"1": "x"}}', "unexpected shape"),
    ('{"run": "run-x", "attempts": {"one": {"restarts": []}}}', "unexpected shape"),
    ('{"run": "run-x", "attempts": {"1": {"restarts": {"a": 1}}}}', "unexpected shape"),
    ('{"run": "run-x", "attempts": {"0": {"restarts": []}}}', "unexpected shape"),
    ('{"run": "run-x", "attempts": {"1": {"restarts": [1]}}}', "unexpected shape"),
    ("{not json", "cannot be read as JSON"),
    # review 26: json.load raised RecursionError, int() ValueError (4300-digit limit): tracebacks
    ("[" * 100_000 + "]" * 100_000, "cannot be read as JSON"),
    ('{"run": "run-x", "attempts": {"' + "1" * 5000 + '": {"restarts": []}}}', "unexpected shape"),
    ('{"run": "run-x", "attempts": {"\u0661": {"restarts": []}}}', "unexpected shape"),
], ids=["attempts-list", "attempt-string", "attempt-key-word", "restarts-dict", "attempt-zero", "restart-int",
        "not-json", "nested-100000", "attempt-5000-digits", "attempt-arabic-digit"])
def test_supervisor_fails_before_training_on_a_bad_state_file(tmp_path, content, named):
    state = tmp_path / "state.json"
    state.write_text(content)
    done = _supervise(state)
    assert done.returncode == 1 and named in done.stdout and "FAILED before training" in done.stdout, done
    assert "Traceback" not in done.stdout + done.stderr and not (tmp_path / "TRAINED").exists()
    assert state.read_text() == content  # left for the user to inspect


def test_supervisor_fails_before_training_on_an_unusable_state_folder(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    for state, named in ((blocker / "state.json", "is not writable"), (tmp_path, "is not a regular file")):
        done = _supervise(state)
        assert done.returncode == 1 and named in done.stdout, done
        assert "Traceback" not in done.stdout + done.stderr


def test_supervisor_budget_takes_an_attempt_recorded_without_restarts(tmp_path):
    """state_problem lets {"1": {}} through (restarts default to none); the budget must then count a
    restart on it, not raise KeyError at the first lost node, mid-run (review 26)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("supervise_r26", SUPERVISE)
    sup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sup)
    state = tmp_path / "state.json"
    state.write_text('{"run": "run-x", "attempts": {"1": {}}}')
    assert sup.state_problem(str(state), "run-x") is None
    budget = sup.Budget(str(state), "run-x", 1, 0, 3)
    budget.restarts.append({"reason": "node lost"})
    budget.record(outcome="RECOVERING")
    assert budget.used == 1 and json.loads(state.read_text())["attempts"]["1"]["restarts"] == [{"reason": "node lost"}]


def test_supervisor_starts_afresh_on_another_runs_state(tmp_path):
    """A state file of another run (or a foreign shape) is not this run's budget: training starts."""
    state = tmp_path / "state.json"
    state.write_text('{"run": "old-run", "attempts": "whatever"}')
    done = _supervise(state)
    assert done.returncode == 0 and (tmp_path / "TRAINED").exists(), done


# --- issue 26: messages stay short and show exact characters ---------------------------------------------


def test_a_megabyte_model_id_gets_a_short_correct_error(sandbox):
    tmp_path, registered = sandbox
    path = write_stack(tmp_path, yaml_case("verl-gke:model", "Qwen/" + "x" * 1_000_000))
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out")])
    assert_refused(rc, text, "verl-gke:model", tmp_path, registered)
    assert len(text) < 2000 and "1000005 characters" in text, len(text)


def test_twenty_thousand_stray_keys_get_a_bounded_message(sandbox):
    """Review 26: 20,000 unknown keys printed 20,000 lines (1.5 MB); the first 100 and a count now."""
    tmp_path, registered = sandbox
    path = write_stack(tmp_path, stack_text() + "".join(f"  verl-gke:gpuNode{i}: 2\n" for i in range(20_000)))
    rc, text = run_main(["--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out")])
    assert_refused(rc, text, "verl-gke:gpuNode0 is not a known key", tmp_path, registered)
    assert "... and 19900 more problems" in text and len(text) < 100_000, len(text)


def test_did_you_mean_is_worked_out_only_for_the_lines_printed():
    """The near-misses past the printed lines get the plain hint: difflib over each of 20,000 stray keys
    took seconds for lines ConfigError never prints."""
    raw = {f"verl-gke:gpuNode{i:05d}": "2" for i in range(MAX_LINES + 50)}
    problems = key_values.unknown_key_problems(raw)
    assert len(problems) == len(raw)
    assert "did you mean verl-gke:gpuNodes?" in str(problems[MAX_LINES - 1])
    assert "did you mean" not in str(problems[MAX_LINES]) and "see Pulumi.yaml" in str(problems[-1])


def test_every_problem_line_is_bounded():
    err = stack_config.ConfigError([Problem("k", "y" * 100_000 + " tail")])
    assert len(str(err)) < 1000 and err.problems[0].endswith(" tail")
