"""ProjectBudget: a Cloud Billing budget on one project with threshold alerts.

Budgets live on the billing account (billingAccounts/<id>/budgets), not in the project: creating
one needs billing.budgets.create on the account (Billing Account Costs Manager or Billing Account
Administrator, https://cloud.google.com/billing/docs/how-to/budgets). With user credentials (ADC)
the Billing Budgets API returns 403 unless the provider names a `billing_project` and sets
`user_project_override` (pulumi-gcp billing.Budget docs), and the caller needs
serviceusage.services.use on that project: the component brings its own provider for that.
Default alerts go by email to the billing account's administrators and users.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from catalog import naming
from catalog.problems import Problem
from components.problems import require

THRESHOLDS = (0.5, 0.9, 1.0)  # share of the amount (BudgetThresholdRule: 1.0-based, 0.5 = 50%)


@dataclass
class ProjectBudgetArgs:
    billing_account: str  # 012345-567890-ABCDEF
    project: str  # project id: the quota/billing project of the Budgets API calls
    project_number: pulumi.Input[str]  # the budget filter names projects by number
    monthly_amount: int
    display_name: str
    thresholds: Sequence[float] = THRESHOLDS

    def problems(self) -> list[Problem]:
        found: list[Problem] = []
        if why := naming.billing_account_id_problem(self.billing_account):
            found.append(Problem("billing_account", why))
        if not isinstance(self.monthly_amount, int) or self.monthly_amount < 1:
            found.append(Problem("monthly_amount", "must be an integer >= 1"))
        if not self.thresholds or any(t <= 0 for t in self.thresholds):
            found.append(Problem("thresholds", "must be shares > 0"))
        if not 1 <= len(self.display_name) <= 60:  # Budget.displayName: at most 60 characters (Budgets API)
            found.append(Problem("display_name", "must be 1-60 characters"))
        return found


class ProjectBudget(pulumi.ComponentResource):
    budget: gcp.billing.Budget

    def __init__(self, name: str, args: ProjectBudgetArgs, opts: pulumi.ResourceOptions | None = None):
        require("ProjectBudget", args)
        super().__init__("verl-gke:budget:ProjectBudget", name, None, opts)
        provider = gcp.Provider(f"{name}-billing", project=args.project, billing_project=args.project,
                                user_project_override=True, opts=pulumi.ResourceOptions(parent=self))
        self.budget = gcp.billing.Budget(
            f"{name}-budget", billing_account=args.billing_account, display_name=args.display_name,
            budget_filter=gcp.billing.BudgetBudgetFilterArgs(
                projects=[pulumi.Output.from_input(args.project_number).apply(lambda n: f"projects/{n}")],
                calendar_period="MONTH"),
            # No currency_code: "If specified, it must match the currency of the billing account"
            # (pulumi-gcp BudgetAmountSpecifiedAmount), so the amount is in the account's currency.
            amount=gcp.billing.BudgetAmountArgs(specified_amount=gcp.billing.BudgetAmountSpecifiedAmountArgs(
                units=str(args.monthly_amount))),
            threshold_rules=[gcp.billing.BudgetThresholdRuleArgs(threshold_percent=t) for t in args.thresholds],
            opts=pulumi.ResourceOptions(parent=self, provider=provider))
        self.register_outputs({"budget": self.budget.name})
