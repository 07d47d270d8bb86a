"""The Pulumi program of the k8s tier: a stack's Kubernetes objects through the real engine and provider.

Served to the real CLI by tests/cli_host.py (`tests.k8s_program:program`). It registers a `kubernetes`
provider for the tier's API server and every object the stack's components render (tests/k8s_layer.py
`registrations`), each as its component registers it: the same type token and inputs, the options a
`pulumi up` acts on (ignoreChanges, replaceOnChanges, retainOnDelete, deleteBeforeReplace) and its
dependencies among them. The provider's own await logic applies (a Job waits for completion,
`pulumi.com/waitFor` on the RayCluster for the head's IP). The Google Cloud resources they also depend on
are not registered.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

OBJECTS_ENV = "VERL_GKE_K8S_TIER_OBJECTS"
KUBECONFIG_ENV = "VERL_GKE_K8S_TIER_KUBECONFIG"


def program() -> None:
    import pulumi
    import pulumi_kubernetes as k8s

    provider = k8s.Provider("tier", kubeconfig=Path(os.environ[KUBECONFIG_ENV]).read_text())
    made: dict[str, pulumi.CustomResource] = {}
    for reg in json.loads(Path(os.environ[OBJECTS_ENV]).read_text()):
        opts = pulumi.ResourceOptions(
            provider=provider, depends_on=[made[name] for name in reg["dependsOn"]],
            ignore_changes=reg["ignoreChanges"] or None, replace_on_changes=reg["replaceOnChanges"] or None,
            retain_on_delete=reg["retainOnDelete"] or None, delete_before_replace=reg["deleteBeforeReplace"] or None)
        made[reg["name"]] = pulumi.CustomResource(reg["type"], reg["name"], dict(reg["object"]), opts)
    pulumi.export("resources", len(made))
