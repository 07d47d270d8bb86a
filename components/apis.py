"""ProjectApis: the Google APIs an empty project must have before anything else is created."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp

# cloudresourcemanager: project IAM grants (the node account's roles) and the project-number lookup.
APIS = ("compute.googleapis.com", "container.googleapis.com", "storage.googleapis.com",
        "iam.googleapis.com", "iamcredentials.googleapis.com", "cloudresourcemanager.googleapis.com",
        # The quota preflight reads QuotaInfo through the Cloud Quotas API (cloudquotas.googleapis.com,
        # https://cloud.google.com/docs/quotas/reference/rest); the optional budget is a resource of the
        # Cloud Billing Budget API (billingbudgets.googleapis.com, Config Connector BillingBudgetsBudget).
        "cloudquotas.googleapis.com", "billingbudgets.googleapis.com")


class ProjectApis(pulumi.ComponentResource):
    services: list[gcp.projects.Service]

    def __init__(self, name: str, project: str, opts: pulumi.ResourceOptions | None = None):
        super().__init__("verl-gke:apis:ProjectApis", name, None, opts)
        # Never disable on destroy: other workloads in the project may use the same APIs.
        self.services = [
            gcp.projects.Service(f"{name}-{api.split('.')[0]}", project=project, service=api,
                                 disable_on_destroy=False, opts=pulumi.ResourceOptions(parent=self))
            for api in APIS
        ]
        self.register_outputs({})
