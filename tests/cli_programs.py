"""Programs the real-CLI tier serves (tests/cli_host.py): the project's own program, recording first what the
CLI handed it.

`record_then_compose` writes the config the program was handed (`pulumi.runtime.config`, every value as the
CLI passed it, a secret's value as "[secret]") to the file named by $VERL_GKE_CONFIG_RECORD, then runs
stacks.compose.program as `pulumi up` does: the record is what the gate read, taken before it reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

RECORD_ENV = "VERL_GKE_CONFIG_RECORD"
SECRET = "[secret]"


def handed_config() -> dict[str, str]:
    """The config the running program was handed, a secret's value replaced by SECRET."""
    import pulumi.runtime.config as rc

    raw = {**rc.get_config_env(), **rc.CONFIG.get()}
    secret = {k for k in raw if rc.is_config_secret(k)} | set(rc.get_config_secret_keys_env())
    return {k: SECRET if k in secret else v for k, v in raw.items()}


def record_config() -> None:
    Path(os.environ[RECORD_ENV]).write_text(json.dumps(handed_config(), indent=1, sort_keys=True))


def record_then_compose() -> None:
    from stacks.compose import program

    record_config()
    program()
