"""The program: the config key table and its gate (keys, config), the stack's own task (dataset), the
checks `pulumi up` runs before registering (preflight, quotas) and the composition of the components
(compose). The GRPO recipe and its models are in recipe/, the accelerator profiles and platform facts in
catalog/, the offline plan in tools/."""
