"""Issue 11, findings 7: the image through a regional mirror with streaming, a digest kept; the bucket's
soft delete off (or a short retention, a config key)."""

from __future__ import annotations

import pytest

from catalog.images import mirrored
from stacks import config
from tests.stack_helpers import BASE, composed

DIGEST = "verlai/verl@sha256:" + "a" * 64
REPO = "kubernetes:ray.io/v1:RayCluster"


@pytest.mark.parametrize("image,expected", [
    ("verlai/verl:vllm011.latest", "us-central1-docker.pkg.dev/p/verl-dockerhub/verlai/verl:vllm011.latest"),
    ("python:3.11", "us-central1-docker.pkg.dev/p/verl-dockerhub/library/python:3.11"),
    ("docker.io/" + DIGEST, "us-central1-docker.pkg.dev/p/verl-dockerhub/" + DIGEST),
    ("us-docker.pkg.dev/x/y/z:1", "us-docker.pkg.dev/x/y/z:1"),  # not Docker Hub: unchanged
    ("ghcr.io/org/img:1", "ghcr.io/org/img:1"),
])
def test_mirrored_reference(image, expected):
    assert mirrored(image, "us-central1", "p", "verl-dockerhub") == expected


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_pods_pull_through_the_regional_remote_repository(mode):
    run = composed({"clusterMode": mode, "image": DIGEST})
    repo = run.one("gcp:artifactregistry/repository:Repository").inputs
    assert repo["mode"] == "REMOTE_REPOSITORY" and repo["format"] == "DOCKER"
    assert repo["remoteRepositoryConfig"]["dockerRepository"]["publicRepository"] == "DOCKER_HUB"
    assert repo["location"] == BASE["gcp:region"]
    want = f"{BASE['gcp:region']}-docker.pkg.dev/{BASE['gcp:project']}/{repo['repositoryId']}/{DIGEST}"
    job = run.one("kubernetes:batch/v1:Job").inputs["spec"]["template"]["spec"]["containers"][0]
    ray = run.one(REPO).inputs["spec"]
    assert job["image"] == want
    assert ray["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == want
    assert ray["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] == want
    apis = {r.inputs["service"] for r in run.of_type("gcp:projects/service:Service")}
    assert {"artifactregistry.googleapis.com", "containerfilesystem.googleapis.com"} <= apis
    if mode == "standard":  # Autopilot streams eligible images by itself
        pools = run.of_type("gcp:container/nodePool:NodePool")
        assert pools and all(p.inputs["nodeConfig"]["gcfsConfig"] == {"enabled": True} for p in pools)


def test_no_mirror_keeps_the_image_as_given():
    run = composed({"imageMirror": False, "image": DIGEST})
    assert run.of_type("gcp:artifactregistry/repository:Repository") == []
    job = run.one("kubernetes:batch/v1:Job").inputs["spec"]["template"]["spec"]["containers"][0]
    assert job["image"] == DIGEST


def test_soft_delete_is_off_by_default_and_a_short_retention_is_a_key():
    bucket = composed({}).one("gcp:storage/bucket:Bucket").inputs
    assert bucket["softDeletePolicy"] == {"retentionDurationSeconds": 0}
    bucket = composed({"bucketSoftDeleteDays": 7}).one("gcp:storage/bucket:Bucket").inputs
    assert bucket["softDeletePolicy"] == {"retentionDurationSeconds": 7 * 86400}


@pytest.mark.parametrize("days", [1, 6, 91, -1])
def test_bad_soft_delete_retention_names_the_key(days):
    raw = {**BASE, "verl-gke:bucketSoftDeleteDays": str(days)}
    with pytest.raises(config.ConfigError) as err:
        config.load(raw, "test")
    assert "verl-gke:bucketSoftDeleteDays" in str(err.value)
    assert ("7..90" if days != 91 else "at most 90") in str(err.value)


def test_the_default_image_is_a_fixed_tag_whose_versions_meet_verls_pins():
    """Issue 22: no floating tag; the image's vLLM and the Ray version we declare meet verl v0.6.1's pins,
    read from the installed verl package's own metadata (requirements-verl-test.txt), and vLLM 0.11's
    Ray floor."""
    import importlib.metadata

    from packaging.requirements import Requirement

    from catalog import versions

    assert not versions.VERL_IMAGE.endswith((":latest", ".latest")) and ":" in versions.VERL_IMAGE
    try:
        requires = [Requirement(r) for r in importlib.metadata.requires("verl") or []]
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("verl is not installed: pip install --no-deps -r requirements-verl-test.txt")
    ray = next(r for r in requires if r.name == "ray")
    vllm = next(r for r in requires if r.name == "vllm")
    assert ray.specifier.contains(versions.RAY_VERSION), (ray, versions.RAY_VERSION)
    assert vllm.specifier.contains(versions.VERL_IMAGE_VLLM), (vllm, versions.VERL_IMAGE_VLLM)
    assert versions.VERL_IMAGE_VLLM.replace(".", "").startswith(versions.VERL_IMAGE.split(":vllm")[1][:3])
    from packaging.version import Version
    assert Version(versions.RAY_VERSION) >= Version(versions.RAY_FLOOR_FOR_VLLM)


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_pods_that_pull_through_the_mirror_wait_for_the_nodes_pull_grant(mode):
    """Issue 43 item 14: a dependent of a component waits for its children only, not for a child of a child
    (pulumi sdk/python lib/pulumi/runtime/rpc.py `_add_dependency`): the grant is the mirror's own child."""
    run = composed({"clusterMode": mode})
    (grant,) = run.of_type("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember")
    for pulls in ("verl-gke:data_prep:DataPrep", "verl-gke:ray_cluster:RayCluster"):
        assert grant.urn in run.one(pulls).depends_on, f"{pulls} may pull before the nodes may read the mirror"
