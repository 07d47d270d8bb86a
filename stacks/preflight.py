"""Stage two of the one validation gate: checks that need a lookup (GKE versions, quota).

Stage one is `stacks.config.load()`: pure, every rule, before anything is registered. The checks
here need the project's APIs, which an empty project only gets from `ProjectApis` in the same run,
so each lookup is an output-based invoke that depends on the APIs, and every billable resource waits
for one `Gate`: the cluster takes an input through it, the NAT's reserved addresses, the image
mirror and the bucket depend on it. Pulumi cannot create them before every check resolved, and a
failed check fails the update with every problem, each naming its config key. At preview on
an empty project a lookup is unknown; `gate()` then resolves unknown and the preview shows the
cluster's gated inputs as unknown instead of guessing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pulumi

from catalog.gke import Floor, unmet, version_key

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


class Gate:
    """The checks' verdict, reached once (its warnings logged once), and what waits for it.

    Whatever bills waits for the gate: the cluster through an input (`value`), the NAT's reserved
    addresses, the image mirror and the bucket through `depends_on` (`after`). A fatal finding raises
    inside the verdict, so none of them is ever registered, let alone created.
    """

    def __init__(self, checks: Sequence[pulumi.Output[list[Finding]]]):
        self.released: pulumi.Output[bool] = (
            pulumi.Output.all(*checks).apply(lambda results: _release(True, results)) if checks
            else pulumi.Output.from_input(True))

    def value(self, value: pulumi.Input[T]) -> pulumi.Output[T]:
        """`value`, released with the verdict: pass it as an input of a billable resource."""
        return pulumi.Output.all(value, self.released).apply(lambda a: a[0])

    def after(self, resource: pulumi.Resource) -> pulumi.Output[pulumi.Resource]:
        """`resource` as a `depends_on` entry that resolves with the verdict: what lists it registers only
        once every check passed (the SDK awaits a depends_on Output before registering: pulumi sdk/python
        runtime/_depends_on.py `_resolve_depends_on`). Children of a component wait with it: the SDK
        registers a child only once its parent's URN is known."""
        return self.released.apply(lambda _: resource)


def gate(value: pulumi.Input[T], checks: Sequence[pulumi.Output[list[Finding]]]) -> pulumi.Output[T]:
    """`value`, released only once every check resolved without a fatal finding (one Gate's `value`)."""
    return Gate(checks).value(value)


def _release(value: T, results: Sequence[list[Finding]]) -> T:
    verdict([f for result in results for f in result])
    return value


# --- GKE version: resolved from the release channel, checked against the floors ------------------


@dataclass(frozen=True)
class GkeVersion:
    """What the version lookup decided: the version to create the cluster at (None when refused)."""

    version: str | None
    findings: list[Finding]
    basis: str  # where the version came from, for the plan and the log


def resolve_gke_version(lookup: Any, *, channel: str, pin: str, floors: Sequence[Floor], location: str,
                        pin_key: str, channel_key: str) -> GkeVersion:
    """Pick the cluster's version from `gcp.container.get_engine_versions` (its result or a dict with the
    same camelCase keys) and check it; every finding names the config key to change.

    No pin: the channel's newest version (cluster-toolkit gke-cluster takes
    release_channel_latest_version[channel] the same way). A minor pin ("1.33"): the lookup ran with
    version_prefix "1.33.", so the channel's entry is its newest 1.33 patch. A full pin: used as given
    when GKE still offers it and the channel reaches it.
    """
    latest = dict(_field(lookup, "release_channel_latest_version") or {})
    valid = list(_field(lookup, "valid_master_versions") or [])
    newest = latest.get(channel)
    findings: list[Finding] = []
    if pin and version_key(pin):
        version, key, basis = pin, pin_key, f"pinned by gkeVersion; the {channel} channel offers up to {newest}"
        if pin not in valid:
            findings.append(Finding(pin_key, f"{pin} is not a version GKE offers in {location} now (it would "
                                             f"answer 400 'Master version ... is unsupported'); offered: "
                                             f"{', '.join(valid[:5]) or 'none'}{' ...' if len(valid) > 5 else ''}; "
                                             "unset gkeVersion to take the channel's newest"))
        elif newest and version_key(newest) and version_key(pin) > version_key(newest):
            findings.append(Finding(pin_key, f"{pin} is newer than {newest}, the newest version of the {channel} "
                                             f"channel in {location}: choose a faster {channel_key} or an older pin"))
    else:
        what = f"newest {pin} patch" if pin else "newest version"
        version, key = newest, (pin_key if pin else channel_key)
        basis = f"the {what} of the {channel} release channel in {location}"
        if not newest:
            findings.append(Finding(key, f"the {channel} release channel in {location} offers no "
                                         f"{pin + '.x ' if pin else ''}version"
                                         + (": unset gkeVersion or pin a minor the channel offers" if pin else "")))
            return GkeVersion(None, findings, basis)
    short = unmet(version, floors) if version_key(version) else []
    if short:
        f = short[0]
        findings.append(Finding(key, f"the version found, {version} ({basis}), is below {f.version}, the floor "
                                     f"for {f.needed_for} ({f.source}): choose a release channel that offers "
                                     f"{f.version} or later (RAPID moves first) or pin gkeVersion to such a version"))
    return GkeVersion(None if findings else version, findings, basis)


def _field(lookup: Any, name: str) -> Any:
    """A field of the invoke's result object, or of a plain dict keyed like the wire (camelCase)."""
    if isinstance(lookup, Mapping):
        head, *rest = name.split("_")
        return lookup.get(head + "".join(p.title() for p in rest), lookup.get(name))
    return getattr(lookup, name, None)
