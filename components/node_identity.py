"""NodeServiceAccount: a dedicated, least-privilege IAM identity for a cluster's nodes.

Without it GKE runs nodes as the Compute Engine default service account, which may hold Editor
on the project. Pods never act as this account: with Workload Identity (GKE_METADATA) they get
their own identity (the bucket binding in components.storage), so it needs only what the node's
own agents do.
"""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

from catalog import naming
from catalog.gke import NODE_ROLES
from catalog.problems import Problem
from components.problems import require


def problems(account_id: str) -> list[Problem]:
    return [Problem("account_id", problem)] if (problem := naming.service_account_id_problem(account_id)) else []


class NodeServiceAccount(pulumi.ComponentResource):
    """`email` resolves once the account exists AND holds its roles: a node config that takes it
    waits for the grants, so no node starts without the rights to log and pull."""

    account: gcp.serviceaccount.Account
    email: pulumi.Output[str]
    roles: tuple[str, ...]

    def __init__(self, name: str, project: str, account_id: str, roles: tuple[str, ...] = NODE_ROLES,
                 opts: pulumi.ResourceOptions | None = None):
        require("NodeServiceAccount", {"account_id": account_id}, problems(account_id), owner="NodeServiceAccount")
        super().__init__("verl-gke:identity:NodeServiceAccount", name, None, opts)
        # A component's depends_on does not reach its children: hand it on (e.g. the IAM API's enablement).
        child = pulumi.ResourceOptions(parent=self, depends_on=opts.depends_on if opts else None)
        self.roles = roles
        self.account = gcp.serviceaccount.Account(
            f"{name}-account", project=project, account_id=account_id,
            display_name=f"GKE nodes of {account_id.removesuffix('-nodes')} (verl-gke)", opts=child)
        member = self.account.email.apply(lambda e: f"serviceAccount:{e}")
        grants = [gcp.projects.IAMMember(f"{name}-{role.split('/')[-1].replace('.', '-')}", project=project,
                                         role=role, member=member, opts=child) for role in roles]
        self.email = pulumi.Output.all(self.account.email, *(g.id for g in grants)).apply(lambda a: a[0])
        self.register_outputs({"email": self.email})
