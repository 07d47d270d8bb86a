"""Stage two of the one validation gate: checks that need a lookup (GKE versions, quota).

Stage one is `stacks.config.load()`: pure, every rule, before anything is registered. The checks
here need the project's APIs, which an empty project only gets from `ProjectApis` in the same run,
so each lookup is an output-based invoke that depends on the APIs, and the first billable resource
(the cluster) takes an input through `gate()`: Pulumi cannot create it before every check resolved,
and a failed check fails the update with every problem, each naming its config key. At preview on
an empty project a lookup is unknown; `gate()` then resolves unknown and the preview shows the
cluster's gated inputs as unknown instead of guessing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import pulumi

T = TypeVar("T")


@dataclass(frozen=True)
class Finding:
    """One check's verdict. `key` is the config key to change; warnings never stop the update."""

    key: str
    message: str
    fatal: bool = True

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


class PreflightError(Exception):
    """Every fatal finding, one per line, as the user sees it in `pulumi up`."""

    def __init__(self, findings: Sequence[Finding]):
        self.findings = list(findings)
        super().__init__("preflight checks failed before anything billable was created:\n  - "
                         + "\n  - ".join(str(f) for f in self.findings))


def verdict(findings: Sequence[Finding]) -> None:
    """Warn for each non-fatal finding; raise PreflightError when any is fatal."""
    for f in findings:
        if not f.fatal:
            pulumi.log.warn(f"preflight: {f}")
    fatal = [f for f in findings if f.fatal]
    if fatal:
        raise PreflightError(fatal)


def gate(value: pulumi.Input[T], checks: Sequence[pulumi.Output[list[Finding]]]) -> pulumi.Output[T]:
    """`value`, released only once every check resolved without a fatal finding.

    Pass the result as an input of the first billable resource: its registration waits for the
    checks, and a fatal finding raises inside the apply, so the resource is never created.
    """
    if not checks:
        return pulumi.Output.from_input(value)
    return pulumi.Output.all(value, *checks).apply(lambda a: _release(a[0], a[1:]))


def _release(value: T, results: Sequence[list[Finding]]) -> T:
    verdict([f for result in results for f in result])
    return value
