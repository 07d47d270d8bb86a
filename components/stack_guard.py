"""Two small dynamic resources that see what the program cannot: the inputs of the last deployment.

StackGuard refuses, at preview, a change of a value that would replace a named singleton (the GKE
cluster, its GPU pool, the networks, the kept bucket). Replacing those fails mid-apply (409: the new
object wants the old one's name, or a bucket location cannot change) or, worse, deletes a live
cluster with its running job. A program only sees the new config, so the check lives in a provider:
the engine hands `check` the old inputs from state next to the new ones (pulumi/pulumi
sdk/python/lib/pulumi/dynamic/__main__.py `Check`: olds and news), and a failed check stops the
preview before any step runs. Why not `protect`: it also blocks `pulumi destroy` (the product's other
command), it is reported only when the replace step is reached, and it names no config key or way out.

BucketKeeper prints, on `pulumi destroy`, the bucket that outlives the stack and how to adopt it
(Pulumi CLI >= 3.146.0 shows a dynamic provider's stderr: pulumi/pulumi#18253).

Like the job provider: importable module, nothing on `self`, no import-time side effects. Pulumi pickles
both providers by reference (dill: `components.stack_guard.StackGuardProvider`/`BucketKeeperProvider`) and
refresh/destroy/removal unpickle them from the state. Their default diff leaves the diff to the engine, which
compares the inputs, the pickle too: a moved class is an update that stores the new pickle.
"""

from __future__ import annotations

import sys
from typing import Any

import pulumi
import pulumi.dynamic as dyn

from catalog.problems import Problem


def _unknown(value: Any) -> bool:
    from pulumi.runtime import rpc

    return rpc.contains_unknowns(value) or value == rpc.UNKNOWN


def refusals(olds: dict[str, Any], news: dict[str, Any]) -> list[Problem]:
    """A problem for each guarded value that changed since the last deployment: its config key, why and the way out.

    `fixed` maps a config key to {"value", "replaces"}. A key absent from the old inputs (a newly guarded
    key) is never refused: the first `up` only records it.
    """
    old, new = olds.get("fixed") or {}, news.get("fixed") or {}
    if _unknown(new):
        return []
    found = []
    for key, was in old.items():
        now = new.get(key)
        if not isinstance(was, dict) or not isinstance(now, dict) or _unknown(now.get("value")):
            continue
        if now.get("value") != was.get("value"):
            found.append(Problem(key, (
                f"changing {key} from {was.get('value')!r} to {now.get('value')!r} would replace "
                f"{now.get('replaces')}: refused before anything changes. Set it back "
                f"(`pulumi config set {key} {was.get('value')}`), or `pulumi destroy` this stack first "
                "(the bucket is kept) and `pulumi up` again with the new value.")))
    return found


class StackGuardProvider(dyn.ResourceProvider):
    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        # Resource-level failures (no property): the engine prints a property failure with the value it finds
        # under that name in the inputs (pulumi/pulumi pkg/resource/deploy/step_generator.go `issueCheckFailures`,
        # commit 1b5949891b3c), and a config key is no input name: "property verl-gke:clusterMode value {<nil>}".
        # The reason names the key itself.
        return dyn.CheckResult(news, [dyn.CheckFailure("", p.allowed) for p in refusals(olds, news)])

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        return dyn.CreateResult("stack-guard", {k: v for k, v in props.items() if not k.startswith("__")})

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        return dyn.UpdateResult({k: v for k, v in news.items() if not k.startswith("__")})


class BucketKeeperProvider(dyn.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        return dyn.CreateResult(str(props.get("bucket") or "bucket"),
                                {k: v for k, v in props.items() if not k.startswith("__")})

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        return dyn.UpdateResult({k: v for k, v in news.items() if not k.startswith("__")})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        if props.get("kept"):
            print(kept_message(props.get("bucket"), props.get("adopt_key") or "bucketName"),
                  file=sys.stderr, flush=True)


def kept_message(bucket: Any, adopt_key: str) -> str:
    return (f"[verl-gke] bucket {bucket} is kept (weights, data, checkpoints) and leaves the state. To use it "
            f"again: `pulumi config set {adopt_key} {bucket}` before the next `pulumi up` (it is imported; "
            f"staged files are not downloaded again). To delete it: `gcloud storage rm --recursive gs://{bucket}`.")


class StackGuard(dyn.Resource, module="verl-gke", name="StackGuard"):
    """`fixed`: {config key: {"value": ..., "replaces": "what a change would replace"}}."""

    def __init__(self, name: str, fixed: dict[str, dict[str, Any]], opts: pulumi.ResourceOptions | None = None):
        super().__init__(StackGuardProvider(), name, {"fixed": fixed}, opts)


class BucketKeeper(dyn.Resource, module="verl-gke", name="BucketKeeper"):
    def __init__(self, name: str, bucket: pulumi.Input[str], kept: bool, adopt_key: str,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(BucketKeeperProvider(), name, {"bucket": bucket, "kept": kept, "adopt_key": adopt_key},
                         opts)
