"""The k8s tier's build inputs: tools/k8s/go.mod's staging replaces are those of its k8s.io/kubernetes, and the
RayCluster CRD the schema tests read is the one of the KubeRay release the tier's operator is built from."""

from __future__ import annotations

import shutil

import pytest

from tests import k8s_cluster, schemas
from tools.k8s import replaces

pytestmark = pytest.mark.k8s


@pytest.fixture(scope="module")
def go_mod() -> str:
    if not shutil.which("go"):
        pytest.skip("no go toolchain here")
    return replaces.GO_MOD.read_text()


def test_the_staging_replaces_are_generated_from_the_kubernetes_release(go_mod):
    assert replaces.render(go_mod) == go_mod


def test_a_staging_module_at_another_release_is_rewritten(go_mod):
    _, staging = replaces.kubernetes_release(go_mod)
    stale = go_mod.replace(f"k8s.io/api => k8s.io/api {staging}", "k8s.io/api => k8s.io/api v0.1.0")
    assert stale != go_mod
    assert replaces.render(stale) == go_mod


def test_every_staging_module_of_the_release_is_replaced(go_mod):
    release, staging = replaces.kubernetes_release(go_mod)
    upstream = replaces.upstream_go_mod(release)
    for module in replaces._STAGING.findall(upstream):
        assert f"\t{module} => {module} {staging}\n" in go_mod


def test_the_schema_tests_raycluster_crd_is_the_operators_own():
    """One KubeRay release for the operator, the CRDs the tier installs and the copy the schema tests validate
    against (tests/data/schemas, tests/schemas.py)."""
    built = k8s_cluster.KUBERAY_CRDS / "ray.io_rayclusters.yaml"
    assert built.read_bytes() == (schemas.REPO / "tests" / "data" / "schemas" / schemas.KUBERAY_RAYCLUSTER).read_bytes()
