"""verl-gke: `pulumi up --stack b200` takes an empty project to a running verl GRPO job."""

from stacks.compose import program

program()
