"""verl-gke: `pulumi up --stack b200` takes an empty project to a running verl GRPO job."""

import sys

# Checked before any import that needs it (the program uses 3.11 features such as typing.Self): an older
# interpreter in venv gets this message instead of an ImportError from deep inside a module.
MIN_PYTHON = (3, 11)
if sys.version_info < MIN_PYTHON:
    sys.exit("verl-gke needs Python {}.{} or newer; venv has {}.{}. Recreate it with a newer python3 "
             "(rm -rf venv, then `pulumi install`).".format(*MIN_PYTHON, *sys.version_info[:2]))

from stacks.compose import program  # noqa: E402 - after the version check, on purpose

program()
