"""The Kubernetes provider's config: no preview can show it replaced, and with it every Kubernetes object.

pulumi-kubernetes DiffConfig (pulumi/pulumi-kubernetes provider/pkg/provider/provider.go, commit
94977969d641) replaces the provider when `kubeconfig`, `context` or `cluster` is unknown, when
`clusterIdentifier` changes (not when it is added), when `renderYamlToDirectory` changes, or when the
kubeconfig's active cluster changes; all but the identifier's own change are forgiven once the identifier
is the same on both sides. The upgrade `up` of a stack from before the identifier adds it, so in that `up`
none of the others may be unknown or changed. The engine resets an ignored input to its value in state
before Check and Diff (pulumi/pulumi pkg/v3 v3.276.0 resource/deploy/step_generator.go processIgnoreChanges).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pulumi.runtime import rpc

from catalog.migrations import DNS_ENDPOINT
from tests import pulumi_cli
from tests.ignored_provider_input import KUBECONFIG_ENV, NAME
from tests.stack_helpers import BASE, STACK_FILES, composed, composed_file, program
from tools import mocking, plan

PROVIDER = "pulumi:providers:kubernetes"
CLUSTER = "gcp:container/cluster:Cluster"
# The provider inputs DiffConfig can replace it on (provider.go @94977969d641).
REPLACING = ("kubeconfig", "context", "cluster", "clusterIdentifier", "renderYamlToDirectory")
# What GKE computes for a cluster: what a preview of its update may not know (the program sets the rest).
CLUSTER_COMPUTED = ("endpoint", "masterAuth", "controlPlaneEndpointsConfig", "selfLink")


def _unknown(value: object) -> bool:
    return value == rpc.UNKNOWN or rpc.contains_unknowns(value)


def _upgrade_preview(path: Path, migrations: list[str] | None = None) -> mocking.Run:
    """`pulumi preview` of the stack file's next `up` on a live stack: every resource in state, the cluster's
    computed outputs unknown."""
    raw, secret_keys = plan.read_stack_file(path)
    raw = {**raw, "gcp:project": BASE["gcp:project"]}
    if migrations is not None:
        raw["verl-gke:migrations"] = json.dumps(migrations)
    in_state = frozenset(r.type for r in composed_file(path).resources)
    return mocking.run(program, raw, path.stem.split(".", 1)[1], secret_keys, preview=True, existing=in_state,
                       unknown={CLUSTER: CLUSTER_COMPUTED})


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_an_upgrade_preview_hands_diffconfig_nothing_unknown_that_replaces_the_provider(path: Path) -> None:
    provider = _upgrade_preview(path).one(PROVIDER)
    assert not _unknown(provider.raw_inputs["clusterIdentifier"])
    seen = {k: v for k, v in provider.raw_inputs.items() if k in REPLACING and k not in provider.ignore_changes}
    assert seen and not [k for k, v in seen.items() if _unknown(v)], (
        f"unknown at preview and not kept from state: {sorted(k for k, v in seen.items() if _unknown(v))}")


def test_a_stack_that_names_the_dns_endpoint_migration_moves_the_provider_to_it() -> None:
    """Once the identifier is recorded, the migration's `up` changes the kubeconfig: an update there."""
    provider = _upgrade_preview(STACK_FILES[0], [DNS_ENDPOINT]).one(PROVIDER)
    assert "kubeconfig" not in provider.ignore_changes
    assert not _unknown(provider.raw_inputs["clusterIdentifier"])


def test_the_provider_reaches_the_dns_endpoint_when_authorized_networks_open_the_ip_endpoint() -> None:
    """The endpoint is the config's choice, not what the cluster reports: with masterAuthorizedNetworks the
    IP endpoint is on, for the listed CIDRs only, and pulumi still goes through the DNS endpoint (README)."""
    run = composed({"masterAuthorizedNetworks": ["203.0.113.0/24"]})
    assert run.one(CLUSTER).inputs["controlPlaneEndpointsConfig"]["ipEndpointsConfig"] == {"enabled": True}
    kubeconfig = json.loads(run.one(PROVIDER).raw_inputs["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"] == {
        "server": "https://" + mocking.MOCK_DNS_ENDPOINT.format(location="us-central1")}


def _provider_steps(ws: pulumi_cli.Workspace, program: str, env: dict[str, str]) -> list[str]:
    preview = ws.run("preview", "--json", program=program, host_env=env)
    assert preview.code == 0, preview
    return [s["op"] for s in json.loads(preview.out).get("steps", []) if s["urn"].endswith(f"::{NAME}")]


@pytest.mark.cli
def test_the_engine_keeps_a_live_providers_kubeconfig_changed_or_unknown(tmp_path: Path) -> None:
    """The real engine, on an explicit provider of a stack that has not named dns-endpoint: a kubeconfig
    unknown at preview is no change, and a changed one leaves the state's in place."""
    ws = pulumi_cli.program_workspace(tmp_path)
    assert ws.run("stack", "init", "live").code == 0
    program = "tests.ignored_provider_input:program"
    first = ws.run("up", "--yes", "--skip-preview", program=program, host_env={KUBECONFIG_ENV: "value:live"})
    assert first.code == 0, first
    assert set(_provider_steps(ws, program, {KUBECONFIG_ENV: "created"})) <= {"same"}
    again = ws.run("up", "--yes", "--skip-preview", program=program, host_env={KUBECONFIG_ENV: "value:new"})
    assert again.code == 0, again
    state = json.loads(ws.run("stack", "export").out)["deployment"]["resources"]
    assert [r["inputs"] for r in state if r["urn"].endswith(f"::{NAME}")] == [{"kubeconfig": "live"}]
