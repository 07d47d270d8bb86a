"""The Pulumi program of the k8s tier's engine test: a stack's Kubernetes objects through the real provider.

Served to the real CLI by tests/cli_host.py (`tests.k8s_program:program`). It registers a
`kubernetes` provider for the tier's API server and the objects (tests/k8s_layer.objects: what the stack's
components render) as one `kubernetes:yaml/v2:ConfigGroup`, which the provider expands into the same typed
resources the components register, each with the provider's own await logic (a Job waits for completion,
`pulumi.com/waitFor` on the RayCluster for the head's IP).
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

    objects = json.loads(Path(os.environ[OBJECTS_ENV]).read_text())
    provider = k8s.Provider("tier", kubeconfig=Path(os.environ[KUBECONFIG_ENV]).read_text())
    group = k8s.yaml.v2.ConfigGroup("layer", objs=objects, opts=pulumi.ResourceOptions(provider=provider))
    pulumi.export("resources", group.resources.apply(len))
