"""Who the nodes are (a dedicated least-privilege service account) and who reaches the control plane."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog.gke import NODE_OAUTH_SCOPES
from components.node_identity import NodeServiceAccount
from tests.stack_helpers import composed
from tools import mocking

CLUSTER = "gcp:container/cluster:Cluster"
POOL = "gcp:container/nodePool:NodePool"
ACCOUNT = "gcp:serviceaccount/account:Account"
MEMBER = "gcp:projects/iAMMember:IAMMember"
REPO_MEMBER = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"
DOC = json.loads((Path(__file__).parent / "data" / "gke_documented_minimums.json").read_text())["node_service_account"]


def _email(run: mocking.Run) -> str:
    account = run.one(ACCOUNT).inputs
    return f"{account['accountId']}@{account['project']}.iam.gserviceaccount.com"


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_a_dedicated_account_holds_only_the_documented_roles(mode):
    run = composed({"clusterMode": mode, "namePrefix": "verl-x"})
    assert run.one(ACCOUNT).inputs["accountId"] == "verl-x-nodes"
    grants = run.of_type(MEMBER)
    roles = sorted(g.inputs["role"] for g in grants)
    assert roles == [DOC["minimum_role"]], "on the project: the documented minimum and nothing else"
    assert not set(roles) & set(DOC["forbidden_roles"])
    assert {g.inputs["member"] for g in grants} == {f"serviceAccount:{_email(run)}"}
    assert {g.inputs["project"] for g in grants} == {"test-project-1"}
    # Image pulls: read on the mirror repository alone, not on every repository of the project.
    (pull,) = run.of_type(REPO_MEMBER)
    assert pull.inputs["role"] == DOC["image_pull_role"]
    assert pull.inputs["member"] == f"serviceAccount:{_email(run)}"
    (repo,) = run.of_type("gcp:artifactregistry/repository:Repository")
    assert pull.inputs["repository"] == repo.inputs["repositoryId"]
    assert pull.inputs["location"] == repo.inputs["location"]
    assert run.outputs["nodeServiceAccount"] == _email(run)


def test_standard_pools_run_as_the_account_after_its_grants():
    run = composed({"clusterMode": "standard"})
    grants = {g.urn for g in run.of_type(MEMBER)}
    cluster = run.one(CLUSTER)
    # The default pool lives only during creation; it too runs as the account.
    assert cluster.inputs["nodeConfig"]["serviceAccount"] == _email(run)
    assert "nodeConfig" in cluster.ignore_changes
    for pool in [*run.of_type(POOL), cluster]:
        node = pool.inputs["nodeConfig"]
        assert node["serviceAccount"] == _email(run), pool.name
        assert node["oauthScopes"] == [DOC["recommended_scope"]] == list(NODE_OAUTH_SCOPES)
        assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}, "pods keep Workload Identity"
        assert grants <= set(pool.property_dependencies["nodeConfig"]), f"{pool.name} may start before its roles"


def test_autopilot_nodes_run_as_the_account_after_its_grants():
    run = composed({"clusterMode": "autopilot"})
    cluster = run.one(CLUSTER)
    defaults = cluster.inputs["clusterAutoscaling"]["autoProvisioningDefaults"]
    assert defaults == {"serviceAccount": _email(run), "oauthScopes": [DOC["recommended_scope"]]}
    grants = {g.urn for g in run.of_type(MEMBER)}
    assert grants <= set(cluster.property_dependencies["clusterAutoscaling"])
    assert "nodeConfig" not in cluster.inputs


def test_the_account_waits_for_the_apis_its_parent_waits_for():
    run = composed()
    apis = {r.urn for r in run.of_type("gcp:projects/service:Service")}
    assert apis <= set(run.one(ACCOUNT).depends_on)
    assert "cloudresourcemanager.googleapis.com" in {r.inputs["service"] for r in
                                                     run.of_type("gcp:projects/service:Service")}


def test_bad_account_id_creates_nothing():
    result = mocking.Run()

    def program():
        NodeServiceAccount("ids", "test-project-1", "Bad_Id")

    with pytest.raises(Exception, match="account_id = 'Bad_Id': must be a service account id"):
        mocking.run(program, {"gcp:project": "test-project-1"}, "t", result=result)
    assert result.resources == []


def test_empty_authorized_networks_keeps_the_endpoint_open():
    cluster = composed().one(CLUSTER).inputs
    assert "masterAuthorizedNetworksConfig" not in cluster


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_authorized_networks_restrict_the_endpoint(mode):
    cidrs = ["203.0.113.0/24", "198.51.100.7/32"]
    cluster = composed({"clusterMode": mode, "masterAuthorizedNetworks": cidrs}).one(CLUSTER).inputs
    blocks = cluster["masterAuthorizedNetworksConfig"]["cidrBlocks"]
    assert [b["cidrBlock"] for b in blocks] == cidrs
    assert all(b["displayName"] for b in blocks)


def test_authorized_networks_from_a_stack_file_string():
    # The CLI hands a list value to the program as a JSON string (pulumi/pulumi @1b5949891b3c
    # sdk/go/common/resource/config/object.go, object.MarshalString):
    # run_config passes the YAML list through the CLI loader, which turns it into that string.
    run = composed({"masterAuthorizedNetworks": ["10.1.0.0/16"]})
    assert run.one(CLUSTER).inputs["masterAuthorizedNetworksConfig"]["cidrBlocks"][0]["cidrBlock"] == "10.1.0.0/16"

