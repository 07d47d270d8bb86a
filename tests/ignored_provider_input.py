"""A program for the real CLI: an explicit provider whose inputs are kept as components.cluster.provider_keep
keeps them on a stack that has not named the dns-endpoint migration, to read what the engine does with a
`kubeconfig` that changes or is unknown.

The provider is the dynamic-provider plugin's (`pulumi-python`, bundled with the CLI): the only one offline. It
implements neither CheckConfig nor DiffConfig, so the engine diffs the inputs itself, after resetting the
ignored ones to their values in state (pkg/v3 v3.276.0 resource/deploy/step_generator.go processIgnoreChanges),
as it resets them before it calls pulumi-kubernetes' CheckConfig and DiffConfig.
VERL_TEST_KUBECONFIG: `value:<text>`, or `created`: an output of a resource this `up` creates (unknown at
preview).
"""

from __future__ import annotations

import os

import pulumi

KUBECONFIG_ENV = "VERL_TEST_KUBECONFIG"
NAME = "cluster-provider"


def program() -> None:
    from components.cluster import provider_keep
    from components.stack_guard import StackGuard

    source = os.environ[KUBECONFIG_ENV]
    if source == "created":
        value = StackGuard("created-this-up", {}).id.apply(lambda _: "from a resource created by this up")
    else:
        value = source.removeprefix("value:")
    pulumi.ProviderResource("pulumi-python", NAME, {"kubeconfig": value},
                            opts=pulumi.ResourceOptions(ignore_changes=provider_keep(frozenset()) or None))
