"""The CLI loader (tools.cli_loader) against upstream's own cases, the generated Pulumi.yaml, the shipped
stacks, and every `pulumi config set` line of the README."""

from __future__ import annotations

import base64
import json
import math
import re
import shlex
from pathlib import Path

import pytest
import yaml

from stacks.keys import KEYS, PROJECT
from tools import cli_loader, plan, schema, stack_file
from tools.stack_file import StackFileError

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = Path(__file__).resolve().parent / "data" / "upstream"
STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))


def _data(name: str) -> dict:
    return yaml.safe_load((UPSTREAM / name).read_text())


def _cases(name: str, key: str = "cases") -> list:
    return _data(name)[key]


# --- pulumi/pulumi's project and config-merge tests ------------------------------------------------

PULUMI = _cases("pulumi_config_load.yaml")


@pytest.mark.parametrize("case", PULUMI, ids=[c["name"] for c in PULUMI])
def test_pulumi_config_cases(case):
    decrypt = (lambda c: base64.b64decode(c).decode()) if case.get("decrypt") == "base64" else None
    if "project_error" in case:
        with pytest.raises(StackFileError) as err:
            cli_loader.parse_project(case["project"], "Pulumi.yaml")
        assert case["project_error"] in str(err.value)
        return
    project = cli_loader.parse_project(case["project"], "Pulumi.yaml")
    if "declared" in case:
        for key, want in case["declared"].items():
            got = project.config[key]
            assert (got.type, got.default, got.secret) == (want["type"], want.get("default"), want["secret"]), key
            if "description" in want:
                assert got.description == want["description"]
            if "items" in want:
                assert got.items.type == want["items"]
            if "items_items" in want:
                assert got.items.items.type == want["items_items"]
        assert len(project.config) == len(case["declared"])
        return
    if "error" in case:
        with pytest.raises(StackFileError) as err:
            cli_loader.load_stack_text(project, case["stack"], "dev", decrypt=decrypt)
        assert case["error"] in str(err.value)
        return
    loaded = cli_loader.load_stack_text(project, case["stack"], "dev", decrypt=decrypt)
    if "values" in case:
        assert loaded.values == case["values"]
    else:
        assert case["ok"] is True


def test_not_expressible_cases_say_why():
    for case in _data("pulumi_config_load.yaml")["not_expressible"]:
        assert case["why"] and case["file"]


# --- yaml.v3's decode and limit tests --------------------------------------------------------------

DECODE = _cases("yaml_v3_decode.yaml")


@pytest.mark.parametrize("case", DECODE, ids=[c["yaml"] for c in DECODE])
def test_yaml_v3_decode_cases(case):
    got = stack_file._load_first_document(case["yaml"], "t.yaml")
    want = case["expect"]
    if "note" in case and "timestamp" in case["note"]:
        assert type(got["a"]).__name__ == "_Timestamp" and got["a"] == want["a"]
        return
    assert _same(got, want), (got, want)


def _same(a, b) -> bool:
    if isinstance(b, float) and math.isinf(b):
        return a == b
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in b)
    if isinstance(b, list):
        return isinstance(a, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


LIMITS = [c for c in _cases("yaml_v3_limits.yaml") if c.get("run", True)]


@pytest.mark.parametrize("case", LIMITS, ids=[c["name"] for c in LIMITS])
def test_yaml_v3_limit_cases(case):
    text = "".join(part * times for part, times in case["parts"])
    if case.get("ours"):
        with pytest.raises(StackFileError, match=re.escape(case["ours"])):
            stack_file._load_first_document(text, "t.yaml")
    else:
        assert case["error"] is None
        stack_file._load_first_document(text, "t.yaml")


def test_every_full_size_limit_case_has_a_scaled_one():
    cases = _cases("yaml_v3_limits.yaml")
    scaled = {c.get("scaled_from") for c in cases}
    for c in cases:
        if c.get("run") is False and c["error"]:
            assert c["name"] in scaled, c["name"]


# --- the key-path grammar (--path) ------------------------------------------------------------------

PATHS = _data("pulumi_property_path.yaml")


@pytest.mark.parametrize("path,want", PATHS["parse"], ids=[p for p, _ in PATHS["parse"]])
def test_property_path_cases(path, want):
    assert cli_loader.parse_property_path(path) == want


@pytest.mark.parametrize("path", PATHS["strict_errors"])
def test_property_path_strict_errors(path):
    with pytest.raises(ValueError):
        cli_loader.parse_property_path(path)


# --- this project: the generated Pulumi.yaml and the shipped stacks ---------------------------------


def test_generated_pulumi_yaml_loads_as_declared():
    project = cli_loader.parse_project(schema.render(), "Pulumi.yaml")
    assert project.name == PROJECT
    for key in KEYS:
        if ":" in key.name or (key.secret and key.default is None):
            assert key.name not in project.config
            continue
        declared = project.config[key.name]
        assert declared.type == key.type and declared.default == key.default, key.name
        assert type(declared.default) is type(key.default), key.name  # yaml.v3 reads back the same type


@pytest.mark.parametrize("stack", STACKS)
def test_shipped_stacks_load_and_get_every_default(stack):
    loaded = cli_loader.load_stack(cli_loader.load_project(ROOT / "Pulumi.yaml"), ROOT / f"Pulumi.{stack}.yaml", stack)
    declared = {k.full for k in KEYS if ":" not in k.name and not (k.secret and k.default is None)}
    assert declared <= set(loaded.values)
    assert loaded.values[f"{PROJECT}:rdmaCidrs"].startswith('["192.168.')  # a list: JSON, as the CLI sends it


def test_injected_defaults_are_the_cli_text():
    project = cli_loader.load_project(ROOT / "Pulumi.yaml")
    values = cli_loader.load_stack_text(project, "config: {}\n", "x").values
    assert values[f"{PROJECT}:gpuNodes"] == "2"
    assert values[f"{PROJECT}:zonalCluster"] == "false"
    assert values[f"{PROJECT}:grpoLearningRate"] == "1e-6"
    assert values[f"{PROJECT}:masterAuthorizedNetworks"] == "[]"
    assert values[f"{PROJECT}:reservation"] == ""


@pytest.mark.parametrize("stack", STACKS)
def test_stacks_plan_identically_with_and_without_injected_defaults(stack):
    """The CLI injects every declared default a stack leaves out: absent and default mean the same."""
    path = ROOT / f"Pulumi.{stack}.yaml"
    plans = []
    for inject in (False, True):
        raw, secret_keys = plan.read_stack_file(path, stack, inject_defaults=inject)
        data = plan.build_plan(stack, raw, secret_keys)
        for r in data["resources"]:  # registration is async: dependency order is not meaningful
            r["dependsOn"] = sorted(r["dependsOn"])
        plans.append(json.dumps(data, sort_keys=True, indent=1))
    assert plans[0] == plans[1]


# --- what the CLI refuses, refused with its reason ------------------------------------------------


def _load(body: str):
    return cli_loader.load_stack_text(cli_loader.load_project(ROOT / "Pulumi.yaml"), body, "t", "Pulumi.t.yaml")


@pytest.mark.parametrize("body,reason", [
    ("config:\n  verl-gke:grpoExtraOverrides: '[\"a=1\"]'\n", "must be of type 'array<string>'"),
    ("config:\n  verl-gke:rdmaCidrs: 10.0.0.0/24\n", "must be of type 'array<string>'"),
    ("config:\n  verl-gke:gpuNodes: '4.0'\n", "must be of type 'integer'"),
    ("config:\n  verl-gke:gpuNodes: '4\n'\n", "must be of type 'integer'"),
    ("config:\n  verl-gke:submitJob: 'yes'\n", "must be of type 'boolean'"),
    ("config:\n  verl-gke:model: [a]\n", "must be of type 'string'"),
    ("config:\n  verl-gke:grpoLogger: [console, 1]\n", "must be of type 'array<string>'"),
])
def test_cli_type_refusals(body, reason):
    with pytest.raises(StackFileError) as err:
        _load(body)
    assert reason in str(err.value) and "Stack 't' with configuration key" in str(err.value)


def test_array_refusal_shows_the_forms_the_cli_accepts():
    with pytest.raises(StackFileError) as err:
        _load("config:\n  verl-gke:grpoExtraOverrides: trainer.total_epochs=1\n")
    text = str(err.value)
    assert "pulumi config set --path 'grpoExtraOverrides[0]'" in text and "YAML list" in text


def test_every_problem_is_reported_at_once():
    with pytest.raises(StackFileError) as err:
        _load("config:\n  verl-gke:gpuNodes: two\n  verl-gke:submitJob: 'no'\n")
    assert "gpuNodes" in str(err.value) and "submitJob" in str(err.value)


# --- `pulumi config set` as the CLI stores it ------------------------------------------------------


def _set(stored: dict, *args: str) -> None:
    """Apply one `pulumi config set` argv (after `config set`)."""
    flags = {"path": False, "secret": False, "type_": None}
    positional = []
    it = iter(args)
    for a in it:
        if a == "--path":
            flags["path"] = True
        elif a == "--secret":
            flags["secret"] = True
        elif a == "--plaintext":
            pass
        elif a == "--type":
            flags["type_"] = next(it)
        elif a in ("-s", "--stack"):
            next(it)
        else:
            positional.append(a)
    key, value = positional
    cli_loader.config_set(PROJECT, stored, key, value, **flags)


def test_config_set_stores_as_the_cli():
    stored: dict = {}
    _set(stored, "gpuNodes", "4")
    _set(stored, "--path", "grpoExtraOverrides[0]", "trainer.total_epochs=1")
    _set(stored, "--path", "grpoExtraOverrides[1]", "trainer.save_freq=5")
    _set(stored, "--path", "obj.flag", "true")
    _set(stored, "--path", "obj.count", "12")
    _set(stored, "--path", "obj.zip", "0123")
    _set(stored, "--secret", "hfToken", "hf_x")
    text = cli_loader.dump_stack(stored)
    doc = stack_file._load_first_document(text, "t")["config"]
    assert doc[f"{PROJECT}:gpuNodes"] == "4"  # a top-level value is a string, quoted so yaml.v3 keeps it one
    assert doc[f"{PROJECT}:grpoExtraOverrides"] == ["trainer.total_epochs=1", "trainer.save_freq=5"]
    assert doc[f"{PROJECT}:obj"] == {"flag": True, "count": 12, "zip": "0123"}  # object.go coerce
    assert doc[f"{PROJECT}:hfToken"] == {"secure": base64.b64encode(b"hf_x").decode()}


@pytest.mark.parametrize("args,reason", [
    (("--path", "a.b[x]", "x"), "invalid array index"),
    (("--path", "a[", "x"), "missing closing bracket"),
    (("--path", "a.secure", "x"), "reserved"),
])
def test_config_set_refusals(args, reason):
    with pytest.raises(ValueError, match=re.escape(reason)):
        _set({}, *args)


def test_path_index_past_the_end():
    """An index past the end of an existing list is refused; on a new key the CLI pads the list with
    nulls (object.go newContainer), which the type check then refuses for array<string>."""
    stored: dict = {}
    _set(stored, "--path", "grpoExtraOverrides[0]", "a=1")
    with pytest.raises(ValueError, match=re.escape("[grpoExtraOverrides 2]: array index out of range")):
        _set(stored, "--path", "grpoExtraOverrides[2]", "x")
    padded: dict = {}
    _set(padded, "--path", "grpoExtraOverrides[1]", "b=2")
    assert padded[f"{PROJECT}:grpoExtraOverrides"] == [None, "b=2"]
    with pytest.raises(StackFileError, match="must be of type 'array<string>'"):
        _load(cli_loader.dump_stack(padded))


def readme_config_set_lines() -> list[tuple[str, bool]]:
    """Every `pulumi config set ...` command in the README (code blocks and inline code), and whether
    the README says the CLI refuses it (its counter-example of a list key set as a string)."""
    text = (ROOT / "README.md").read_text()
    found = []
    for m in re.finditer(r"pulumi config set [^`\n]*", text):
        # `a && b && pulumi up`: the config-set commands of one line, replayed in order (a list built
        # index by index only works as a whole).
        parts = [p.strip() for p in m.group(0).split("#")[0].split("&&")]
        line = " && ".join(p for p in parts if p.startswith("pulumi config set"))
        found.append((line, "the CLI refuses" in text[m.end():m.end() + 120]))
    return found


README_LINES = readme_config_set_lines()


def _replayable(line: str) -> list[str]:
    # Placeholders (<64 hex digits>, hf_..., ...) stand for what the user types: any text does.
    # A placeholder of a stated shape is filled in that shape (`<64 hex digits>`: a digest's 64 hex digits).
    line = re.sub(r"<(\d+) hex digits>", lambda m: "0" * int(m.group(1)), line)
    line = re.sub(r"<[^>]*>", "placeholder", line)
    return [("placeholder" if a == "..." else a) for a in shlex.split(line)[3:]]


def _replay(stored: dict, line: str) -> None:
    for command in line.split(" && "):
        _set(stored, *_replayable(command))


def test_readme_has_config_set_lines():
    assert len(README_LINES) >= 10 and any("--path" in line for line, _ in README_LINES)
    assert any(refused for _, refused in README_LINES)  # the README's own counter-example is checked too


@pytest.mark.parametrize("line,refused", README_LINES, ids=[line for line, _ in README_LINES])
def test_readme_config_set_line_replays_and_loads(line, refused):
    """Replayed into each shipped stack file the way the CLI stores it, the result loads through the
    loader (or, for the README's counter-example, is refused as the README says)."""
    project = cli_loader.load_project(ROOT / "Pulumi.yaml")
    for stack in STACKS:
        raw_doc = stack_file._load_first_document((ROOT / f"Pulumi.{stack}.yaml").read_text(), "s")
        stored = {stack_file._namespace_key(k, PROJECT): v for k, v in raw_doc["config"].items()}
        _replay(stored, line)
        text = cli_loader.dump_stack(stored)
        if refused:
            with pytest.raises(StackFileError, match="must be of type 'array<string>'"):
                cli_loader.load_stack_text(project, text, stack, f"Pulumi.{stack}.yaml")
        else:
            cli_loader.load_stack_text(project, text, stack, f"Pulumi.{stack}.yaml")


def test_all_readme_lines_together_load():
    project = cli_loader.load_project(ROOT / "Pulumi.yaml")
    stored: dict = {}
    for line, refused in README_LINES:
        if not refused:
            _replay(stored, line)
    cli_loader.load_stack_text(project, cli_loader.dump_stack(stored), "all")


def test_small_alias_expansion_is_accepted_as_yaml_v3_does():
    """yaml.v3 lets up to 99 % of decoded nodes come from aliases in documents under 400,000 nodes
    (decode.go allowedAliasRatio): a 1,000-fold expansion of a tiny list is still accepted."""
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 4)]
    doc = stack_file._load_first_document("\n".join(lines) + "\n", "t.yaml")
    assert len(doc["a3"]) == 10 and doc["a3"][9][9] == [["x"]] * 10


def test_readme_wandb_lines_keep_the_default_loggers():
    """`grpoLogger`'s default is not in the stack file, so `--path 'grpoLogger[2]' wandb` alone stores
    [null, null, wandb] (object.go newContainer; refused as array<string>) and `[0]` drops console and
    tensorboard: the README's lines must leave every shipped stack with all three loggers and the key."""
    lines = [line for line, refused in README_LINES if "grpoLogger" in line and not refused]
    assert lines, "the README shows no `pulumi config set` line that adds wandb to grpoLogger"
    project = cli_loader.load_project(ROOT / "Pulumi.yaml")
    for stack in STACKS:
        raw_doc = stack_file._load_first_document((ROOT / f"Pulumi.{stack}.yaml").read_text(), "s")
        stored = {stack_file._namespace_key(k, PROJECT): v for k, v in raw_doc["config"].items()}
        for line, _ in README_LINES:
            if "wandbApiKey" in line or "grpoLogger" in line:
                _replay(stored, line)
        loaded = cli_loader.load_stack_text(project, cli_loader.dump_stack(stored), stack)
        assert json.loads(loaded.values[f"{PROJECT}:grpoLogger"]) == ["console", "tensorboard", "wandb"], stack
        assert f"{PROJECT}:wandbApiKey" in loaded.secret_keys, stack
