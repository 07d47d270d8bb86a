"""Stage two of the one validation gate: checks that need a lookup (GKE versions, quota).

Stage one is `stacks.config.load()`: pure, every rule, before anything is registered. The checks
here need the project's APIs, which an empty project only gets from `ProjectApis` in the same run,
so each lookup is an output-based invoke that depends on the APIs, and every billable resource waits
for one `Gate`: the cluster takes an input through it, the NAT's reserved addresses, the image
mirror and the bucket depend on it. Pulumi cannot create them before every check resolved, and a
failed check fails the update with every problem (catalog.problems.Problem), each naming its config key. At preview on
an empty project a lookup is unknown; `gate()` then resolves unknown and the preview shows the
cluster's gated inputs as unknown instead of guessing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pulumi

from catalog.gke import Floor, unmet, version_key
from catalog.problems import ConfigError, Problem

T = TypeVar("T")
Check = pulumi.Output[list[Problem]]  # one lookup's problems, once it resolved
REFUSED = "preflight checks failed before anything billable was created"  # what a refusal's message starts with


def verdict(found: Sequence[Problem]) -> None:
    """Warn for each warning (a problem that is not fatal); raise ConfigError with every fatal one."""
    for p in found:
        if not p.fatal:
            pulumi.log.warn(f"preflight: {p}")
    fatal = [p for p in found if p.fatal]
    if fatal:
        raise ConfigError(fatal, REFUSED)


class Gate:
    """The checks' verdict, reached once (its warnings logged once), and what waits for it.

    Whatever bills waits for the gate: the cluster through an input (`value`), the NAT's reserved
    addresses, the image mirror and the bucket through `depends_on` (`after`). A fatal problem raises
    inside the verdict, so none of them is ever registered, let alone created.
    """

    def __init__(self, checks: Sequence[Check]):
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


def gate(value: pulumi.Input[T], checks: Sequence[Check]) -> pulumi.Output[T]:
    """`value`, released only once every check resolved without a fatal problem (one Gate's `value`)."""
    return Gate(checks).value(value)


def _release(value: T, results: Sequence[list[Problem]]) -> T:
    verdict([p for result in results for p in result])
    return value


# --- GKE version: resolved from the release channel, checked against the floors ------------------


@dataclass(frozen=True)
class GkeVersion:
    """What the version lookup decided: the version to create the cluster at (None when refused)."""

    version: str | None
    problems: list[Problem]
    basis: str  # where the version came from, for the plan and the log


def resolve_gke_version(lookup: Any, *, channel: str, pin: str, floors: Sequence[Floor], location: str,
                        pin_key: str, channel_key: str) -> GkeVersion:
    """Pick the cluster's version from `gcp.container.get_engine_versions` (its result or a dict with the
    same camelCase keys) and check it; every problem names the config key to change.

    No pin: the channel's newest version (cluster-toolkit gke-cluster takes
    release_channel_latest_version[channel] the same way). A minor pin ("1.33"): the lookup ran with
    version_prefix "1.33.", so the channel's entry is its newest 1.33 patch. A full pin: used as given
    when GKE still offers it and the channel reaches it.
    """
    latest = dict(_field(lookup, "release_channel_latest_version") or {})
    valid = list(_field(lookup, "valid_master_versions") or [])
    newest = latest.get(channel)
    problems: list[Problem] = []
    if pin and version_key(pin):
        version, key, basis = pin, pin_key, f"pinned by gkeVersion; the {channel} channel offers up to {newest}"
        if pin not in valid:
            problems.append(Problem(pin_key, f"{pin} is not a version GKE offers in {location} now (it would "
                                             f"answer 400 'Master version ... is unsupported'); offered: "
                                             f"{', '.join(valid[:5]) or 'none'}{' ...' if len(valid) > 5 else ''}; "
                                             "unset gkeVersion to take the channel's newest"))
        elif newest and version_key(newest) and version_key(pin) > version_key(newest):
            problems.append(Problem(pin_key, f"{pin} is newer than {newest}, the newest version of the {channel} "
                                             f"channel in {location}: choose a faster {channel_key} or an older pin"))
    else:
        what = f"newest {pin} patch" if pin else "newest version"
        version, key = newest, (pin_key if pin else channel_key)
        basis = f"the {what} of the {channel} release channel in {location}"
        if not newest:
            problems.append(Problem(key, f"the {channel} release channel in {location} offers no "
                                         f"{pin + '.x ' if pin else ''}version"
                                         + (": unset gkeVersion or pin a minor the channel offers" if pin else "")))
            return GkeVersion(None, problems, basis)
    short = unmet(version, floors) if version_key(version) else []
    if short:
        f = short[0]
        problems.append(Problem(key, f"the version found, {version} ({basis}), is below {f.version}, the floor "
                                     f"for {f.needed_for} ({f.source}): choose a release channel that offers "
                                     f"{f.version} or later (RAPID moves first) or pin gkeVersion to such a version"))
    return GkeVersion(None if problems else version, problems, basis)


def _field(lookup: Any, name: str) -> Any:
    """A field of the invoke's result object, or of a plain dict keyed like the wire (camelCase)."""
    if isinstance(lookup, Mapping):
        head, *rest = name.split("_")
        return lookup.get(head + "".join(p.title() for p in rest), lookup.get(name))
    return getattr(lookup, name, None)
