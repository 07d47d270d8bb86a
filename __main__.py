"""verl-gke: `pulumi up --stack b200` takes an empty project to a running verl GRPO job."""

import pulumi

from stacks import compose, config

try:
    cfg = config.from_pulumi(pulumi.get_stack())
except config.ConfigError as err:
    # RunError prints the message alone: every problem, each naming its config key.
    raise pulumi.RunError(str(err)) from None

for key, value in compose.build(cfg, hf_token=pulumi.Config().get_secret("hfToken")).items():
    pulumi.export(key, value)
