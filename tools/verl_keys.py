"""catalog/verl_config.json, generated from verl's own Hydra config at the pinned tag.

`pulumi up` judges the stack's extra verl overrides (recipe.overrides) against verl's config key tree, but
never installs verl (it pulls torch and vLLM); this tool composes verl's `ppo_trainer` config (the one
verl.trainer.main_ppo and components/scripts/verl_main.py compose) from the installed verl package's YAML
(`pip install --no-deps -r requirements-verl-test.txt`), reading it, never importing verl, and writes each
key with the kind of its default.

    python -m tools.verl_keys --write   # rewrite catalog/verl_config.json
    python -m tools.verl_keys --check   # exit 1 if it differs from the installed verl (a test runs it)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from catalog import verl_config
from catalog.versions import VERL_VERSION

CONFIG_NAME = "ppo_trainer"  # verl/trainer/main_ppo.py @hydra.main(config_name="ppo_trainer")


class VerlMissingError(Exception):
    """verl at the pinned version is not installed: nothing to read the tree from."""


def config_dir() -> Path:
    """The installed verl's trainer/config folder (found without running verl's __init__, which imports torch)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise VerlMissingError("verl is not installed: pip install --no-deps -r requirements-verl-test.txt")
    installed = importlib.metadata.version("verl")
    if installed != VERL_VERSION.removeprefix("v"):
        raise VerlMissingError(f"verl {installed} is installed, the pin is {VERL_VERSION} (catalog/versions.py)")
    return Path(spec.submodule_search_locations[0]) / "trainer" / "config"


def _kind(node: Any) -> str:
    from omegaconf import DictConfig, ListConfig

    if node._is_missing():
        return "missing"
    if node._is_none():
        return "null"
    if node._is_interpolation():
        return "interpolation"
    if isinstance(node, DictConfig):
        return "dict"
    if isinstance(node, ListConfig):
        return "list"
    return type(node._value()).__name__  # str, int, float, bool


def _walk(node: Any, prefix: str, out: dict[str, str]) -> None:
    from omegaconf import DictConfig

    for key in node.keys():
        child = node._get_node(key)
        dotted = f"{prefix}{key}"
        out[dotted] = _kind(child)
        if out[dotted] == "dict" and isinstance(child, DictConfig):
            _walk(child, dotted + ".", out)


def generated() -> dict[str, Any]:
    """The data file's content, read from the installed verl (raises VerlMissingError)."""
    import hydra
    from hydra import compose, initialize_config_dir

    folder = config_dir()
    with initialize_config_dir(config_dir=str(folder), version_base=None):
        cfg = compose(config_name=CONFIG_NAME)
    keys: dict[str, str] = {}
    _walk(cfg, "", keys)
    groups = sorted(p.name for p in folder.iterdir() if p.is_dir() and any(p.glob("*.yaml")))
    return {
        "source": f"volcengine/verl {VERL_VERSION} verl/trainer/config/{CONFIG_NAME}.yaml and its config groups, "
                  f"composed by hydra-core {hydra.__version__} without overrides (tools/verl_keys.py)",
        "verl": VERL_VERSION,
        "groups": groups,
        "keys": keys,
    }


def text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.verl_keys", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    try:
        data = generated()
    except VerlMissingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.write:
        verl_config.PATH.write_text(text(data))
        return 0
    stored = json.loads(verl_config.PATH.read_text()) if verl_config.PATH.is_file() else {}
    # The hydra-core version in `source` is informative: the tree, not the composer's patch, must agree.
    differ = [k for k in ("verl", "groups", "keys") if stored.get(k) != data[k]]
    if differ:
        keys = set(stored.get("keys", {})) ^ set(data["keys"])
        print(f"{verl_config.PATH.name} is stale ({', '.join(differ)} differ"
              f"{f'; keys in one only: {sorted(keys)[:10]}' if keys else ''}): run `python -m tools.verl_keys --write`",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
