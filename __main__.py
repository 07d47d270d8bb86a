"""verl-gke: `pulumi up --stack b200` takes an empty project to a running verl GRPO job."""

import sys

# Checked before any import that needs it (the program uses 3.11 features such as typing.Self): an older
# interpreter in venv gets this message instead of an ImportError from deep inside a module.
MIN_PYTHON = (3, 11)
if sys.version_info < MIN_PYTHON:
    # Pulumi creates venv with $PULUMI_PYTHON_CMD, else the first python3 on PATH (pulumi/pulumi @ 1b5949891b3c
    # sdk/python/toolchain/pip.go CommandPath): recreating it without naming a newer one gives the same venv.
    sys.exit("verl-gke needs Python {0}.{1} or newer; venv has {2}.{3}. Recreate it with a newer interpreter: "
             "rm -rf venv && PULUMI_PYTHON_CMD=python{0}.{1} pulumi install (or any python3 >= {0}.{1}; "
             "Pulumi uses PULUMI_PYTHON_CMD, else the first python3 on PATH).".format(*MIN_PYTHON,
                                                                                     *sys.version_info[:2]))

from stacks.compose import program  # noqa: E402 - after the version check, on purpose

program()
