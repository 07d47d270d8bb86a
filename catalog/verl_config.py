"""verl's Hydra config key tree at the pinned tag (catalog.versions.VERL_VERSION), without verl installed.

verl_config.json holds every key of verl's composed `ppo_trainer` config with the kind of its default
(dict, list, null, str, int, float, bool, missing, interpolation) and verl's config group folders. It is
generated from verl's own YAML by `python -m tools.verl_keys --write`; a test checks it against the
installed verl==0.6.1 (requirements-verl-test.txt).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

PATH = Path(__file__).with_name("verl_config.json")


@dataclass(frozen=True)
class VerlConfig:
    version: str
    groups: frozenset[str]  # config group folders (actor, data, ...): `data=<name>` picks one
    keys: dict[str, str]  # dotted key -> kind of verl's default

    def kind(self, key: str) -> str | None:
        return self.keys.get(key)

    def children(self, key: str) -> list[str]:
        """The names of a dict node's keys (the top level for "")."""
        prefix = f"{key}." if key else ""
        return [k[len(prefix):] for k in self.keys if k.startswith(prefix) and "." not in k[len(prefix):]]


@functools.cache
def tree() -> VerlConfig:
    data = json.loads(PATH.read_text())
    return VerlConfig(version=data["verl"], groups=frozenset(data["groups"]), keys=dict(data["keys"]))
