"""Loading, for real: the real Pulumi CLI (tools/pulumi-cli, v3.276.0) loads each stack file, the README's
`pulumi config set` lines and the gate's bad-config cases, and runs the project's program on what it loaded.

Every preview serves the program behind a recorder (tests/cli_programs.py) that writes the config the CLI
handed it before the gate reads it; the CLI's event log (`--event-log`, shown with PULUMI_DEBUG_COMMANDS)
orders what the program and the engine said. So each case checks, under the real loader:
- the verdict: a good stack passes the gate (its one-line "accepted" message) and then stops only at the
  first provider plugin that cannot be had offline (pulumi-resource-gcp); a bad one is refused by the gate
  or by the CLI's own type check, naming the key, before any resource is registered;
- the offline reader (tools.stack_file, what tools.plan reads) reads the stack file as the program was
  handed it: the same keys and strings, the same secret keys.
A preview is shared by the tests that read it (module scope): one per stack file.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import docs, pulumi_cli
from tests.cli_programs import RECORD_ENV, SECRET
from tools import stack_file

pytestmark = pytest.mark.cli

ROOT = pulumi_cli.ROOT
STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))
README = docs.text()  # the README, then docs/*.md
GCP_PLUGIN_MISSING = "no resource plugin 'pulumi-resource-gcp' found"
ACCEPTED = re.compile(r"^config of stack \S+ accepted: ")


# --- the CLI runs ---------------------------------------------------------------------------------------------


@dataclass
class Preview:
    """One `pulumi preview` of a stack: its result, the engine's events, and the config the program was handed
    (None: the program never ran)."""

    result: pulumi_cli.Result
    events: list[dict]
    record: dict[str, str] | None
    config_json: dict[str, dict]  # `pulumi config --json` just before the preview
    stack_text: str  # the stack file as the CLI left it

    def diagnostics(self, severity: str) -> list[tuple[int, str]]:
        return [(e["sequence"], e["diagnosticEvent"]["message"]) for e in self.events
                if "diagnosticEvent" in e and e["diagnosticEvent"]["severity"] == severity]

    def errors(self) -> str:
        return "\n".join(m for _, m in self.diagnostics("error")) + self.result.text

    def registered(self) -> list[str]:
        return [e["resourcePreEvent"]["metadata"]["type"] for e in self.events if "resourcePreEvent" in e]


class Runs:
    """The module's CLI runs, each in its own project copy and state backend, run once and shared."""

    def __init__(self, root: Path):
        self.root = root
        self.previews: dict[str, Preview] = {}

    def workspace(self, name: str, stack_text: str, stack: str) -> tuple[pulumi_cli.Workspace, Path]:
        folder = self.root / name
        shutil.rmtree(folder, ignore_errors=True)  # an earlier test's failed attempt at the same run
        project = pulumi_cli.project_copy(folder / "project")
        path = project / f"Pulumi.{stack}.yaml"
        path.write_text(stack_text)
        return pulumi_cli.Workspace(project, folder / "scratch", env={"PULUMI_DEBUG_COMMANDS": "true"}), path

    def preview(self, name: str, stack_text: str, stack: str = "dev", commands: list[list[str]] = ()) -> Preview:
        if name in self.previews:
            return self.previews[name]
        ws, path = self.workspace(name, stack_text, stack)
        for argv in [["stack", "select", stack, "--create"], *commands]:
            done = ws.run(*argv)
            assert done.code == 0, done
        shown = ws.run("config", "--json")
        assert shown.code == 0, shown
        events, record = ws.scratch / "events.jsonl", ws.scratch / "record.json"
        result = ws.run("preview", "--event-log", str(events), program="tests.cli_programs:record_then_compose",
                        host_env={RECORD_ENV: str(record)})
        self.previews[name] = Preview(
            result, [json.loads(line) for line in events.read_text().splitlines()] if events.exists() else [],
            json.loads(record.read_text()) if record.exists() else None, json.loads(shown.out), path.read_text())
        return self.previews[name]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Runs:
    return Runs(tmp_path_factory.mktemp("cli-loading"))


def offline(text: str, stack: str = "dev", changed: dict[str, str] | None = None) -> dict[str, str]:
    """What the offline reader hands the program for a stack file's text (secrets as the recorder writes them),
    with the keys `pulumi config set` changed since."""
    reading = stack_file.from_text(text, stack, f"Pulumi.{stack}.yaml")
    values = {**reading.values, **(changed or {})}
    return {k: SECRET if k in reading.secret_keys else v for k, v in values.items()}


def with_lines(text: str, lines: dict[str, str]) -> str:
    """A stack file's text with `key: value` lines replaced (same key) or added."""
    for key, value in lines.items():
        pattern = re.compile(rf"^  {re.escape(key)}:.*\n", re.M)
        line = f"  {key}: {value}\n"
        text = pattern.sub(lambda _, line=line: line, text, count=1) if pattern.search(text) else text + line
    return text


def dev_text() -> str:
    return (ROOT / "Pulumi.dev.yaml").read_text()


def assert_passes_the_gate_then_stops_at_the_gcp_plugin(run: Preview) -> None:
    assert run.result.code != 0, run.result
    accepted = [seq for seq, message in run.diagnostics("info") if ACCEPTED.match(message)]
    errors = run.diagnostics("error")
    assert accepted, f"the gate's verdict is missing\n{run.result}"
    assert errors and GCP_PLUGIN_MISSING in errors[0][1], errors[:3] or run.result
    assert accepted[0] < errors[0][0], "the plugin error came before the gate's verdict"


# --- the README's `pulumi config set` lines, as written ---------------------------------------------------------


def readme_config_set_lines() -> list[tuple[str, bool]]:
    """Every `pulumi config set ...` command of the README (code blocks and inline code), and whether the README
    says the CLI refuses it (its counter-example of a list key set as a string)."""
    found = []
    for m in re.finditer(r"pulumi config set [^`\n]*", README):
        # `a && b && pulumi up`: the config-set commands of one line, in order (a list built index by index)
        parts = [p.strip() for p in m.group(0).split("#")[0].split("&&")]
        line = " && ".join(p for p in parts if p.startswith("pulumi config set"))
        found.append((line, "the CLI refuses" in README[m.end():m.end() + 120]))
    return found


def replayed(line: str) -> list[list[str]]:
    """A README line's commands as argv (after `pulumi`), its placeholders filled: `<64 hex digits>` in that
    shape, any other `<...>` (and `...`) with a word, as a user fills them with their own text."""
    line = re.sub(r"<(\d+) hex digits>", lambda m: "0" * int(m.group(1)), line)
    line = re.sub(r"<[^>]*>", "placeholder", line)
    return [["placeholder" if a == "..." else a for a in shlex.split(command)[1:]] for command in line.split(" && ")]


README_LINES = readme_config_set_lines()
README_ACCEPTED = [argv for line, refused in README_LINES if not refused for argv in replayed(line)]
README_REFUSED = [argv for line, refused in README_LINES if refused for argv in replayed(line)]
PROJECT_ID = next(argv[3] for argv in README_ACCEPTED if argv[:3] == ["config", "set", "gcp:project"])


def test_the_readme_has_config_set_lines_with_secrets_paths_and_its_counter_example():
    flags = {a for argv in README_ACCEPTED for a in argv}
    assert len(README_ACCEPTED) >= 15 and {"--secret", "--path"} <= flags, README_ACCEPTED
    assert README_REFUSED == [["config", "set", "grpoExtraOverrides", "placeholder"]]


def readme_run(runs: Runs) -> Preview:
    """Every README line but its counter-example, replayed in order onto the dev stack (the quick start's)."""
    return runs.preview("readme", dev_text(), "dev", README_ACCEPTED)


def test_readme_lines_replayed_read_offline_as_the_program_was_handed_them(runs):
    run = readme_run(runs)
    assert run.record is not None, run.result
    assert offline(run.stack_text) == run.record


def test_readme_lines_replayed_pass_the_gate_then_stop_at_the_gcp_plugin(runs):
    assert_passes_the_gate_then_stops_at_the_gcp_plugin(readme_run(runs))


def test_readme_counter_example_is_refused_by_the_cli_before_the_program_runs(runs):
    run = runs.preview("readme-refused", dev_text(), "dev", README_REFUSED)
    assert run.result.code != 0 and run.record is None, run.result
    assert "configuration key 'grpoExtraOverrides' must be of type 'array<string>'" in run.result.text
    with pytest.raises(stack_file.StackFileError, match=re.escape("key 'grpoExtraOverrides' must be of type")):
        stack_file.from_text(run.stack_text, "dev", "Pulumi.dev.yaml")


# --- every shipped stack, with the README's project id -----------------------------------------------------------


def shipped_run(runs: Runs, stack: str) -> Preview:
    return runs.preview(f"shipped-{stack}", (ROOT / f"Pulumi.{stack}.yaml").read_text(), stack,
                        [["config", "set", "gcp:project", PROJECT_ID]])


@pytest.mark.parametrize("stack", STACKS)
def test_shipped_stack_passes_the_gate_then_stops_at_the_gcp_plugin(runs, stack):
    assert_passes_the_gate_then_stops_at_the_gcp_plugin(shipped_run(runs, stack))


@pytest.mark.parametrize("stack", STACKS)
def test_shipped_stack_file_reads_offline_as_the_program_was_handed_it(runs, stack):
    run = shipped_run(runs, stack)
    text = (ROOT / f"Pulumi.{stack}.yaml").read_text()  # the file as shipped, before the CLI rewrote it
    assert offline(text, stack, {"gcp:project": PROJECT_ID}) == run.record


@pytest.mark.parametrize("stack", STACKS)
def test_pulumi_config_shows_what_the_offline_reader_reads(runs, stack):
    run = shipped_run(runs, stack)
    shown = {k: SECRET if v["secret"] else v["value"] for k, v in run.config_json.items()}
    assert shown == offline((ROOT / f"Pulumi.{stack}.yaml").read_text(), stack, {"gcp:project": PROJECT_ID})


# --- YAML 1.2 as yaml.v3 reads it, where PyYAML (YAML 1.1) differs -----------------------------------------------

YAML_12 = {  # (line, what yaml.v3 makes of it): a stack that passes the gate
    "verl-gke:gpuNodes": "1.0",  # a float: "1"
    "verl-gke:grpoLearningRate": "1e-6",  # a float to yaml.v3 (a string to PyYAML): "0.000001"
    "verl-gke:grpoKlLossCoef": "1e-3",
    "verl-gke:cpuNodesMax": "0x2",
    "verl-gke:rayHeadMemoryGib": "0o10",  # YAML 1.2 octal (a string to PyYAML): 8
    "verl-gke:jobMaxRecoveries": "0_3",  # yaml.v3 drops the underscore, then reads 03 as octal
    "verl-gke:grpoValBeforeTrain": "False",
    "verl-gke:zonalCluster": "TRUE",
    "verl-gke:bucketLocation": "~",  # null: ""
    "mtu": "8704",  # no namespace: the project's
    "verl-gke:config:jobMergeModel": "true",  # the legacy ns:config:name form
    "verl-gke:masterAuthorizedNetworks": "&nets [203.0.113.0/24]",
    "verl-gke:grpoExtraOverrides": "[trainer.log_val_generations=0]",
}


def yaml_12_run(runs: Runs) -> Preview:
    text = with_lines(dev_text(), {**YAML_12, "gcp:project": PROJECT_ID})
    return runs.preview("yaml-1.2", text, "dev")


def test_yaml_1_2_scalars_read_offline_as_the_program_was_handed_them(runs):
    run = yaml_12_run(runs)
    assert run.record is not None, run.result
    assert offline(with_lines(dev_text(), {**YAML_12, "gcp:project": PROJECT_ID})) == run.record
    assert run.record["verl-gke:grpoLearningRate"] == "0.000001" and run.record["verl-gke:rayHeadMemoryGib"] == "8"


def test_yaml_1_2_scalars_pass_the_gate_then_stop_at_the_gcp_plugin(runs):
    assert_passes_the_gate_then_stops_at_the_gcp_plugin(yaml_12_run(runs))


# --- refused by the gate: several problems of one stack file, each named -------------------------------------

GATE_CASES = {  # case -> (line, what the gate's message says)
    "typo-of-a-key": ("verl-gke:gpuNode", "2", "verl-gke:gpuNode is not a known key: did you mean verl-gke:gpuNodes?"),
    "typo-without-namespace": ("gpunodes", "2", "verl-gke:gpunodes is not a known key: did you mean verl-gke:gpuNodes"),
    "typo-of-the-namespace": ("verl_gke:gpuNodes", "2", "namespace 'verl_gke' is not this project's; did you mean "
                              "verl-gke:gpuNodes?"),
    "typo-of-a-google-key": ("gcp:impersonateServiceAcount", "sa@p.iam.gserviceaccount.com",
                             "did you mean gcp:impersonateServiceAccount?"),
    "namespace-nothing-reads": ("kubernetes:context", "my-cluster", "nothing in this program reads namespace "
                                "'kubernetes'"),
    "no-namespace-is-the-project": ("rayHeadCpu", "0", "verl-gke:rayHeadCpu = 0"),
    "legacy-config-segment": ("verl-gke:config:cpuNodesMin", "5000", "verl-gke:cpuNodesMin = 5000: must be at most"),
    "required-empty": ("gcp:region", "''", "gcp:region is not set"),
    "required-null": ("gcp:zone", "~", "gcp:zone is not set"),
    "secret-key-as-a-list": ("verl-gke:hfToken", "[hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789]",
                             "verl-gke:hfToken = [secret]: must be one string, not a list or map"),
    "secret-key-in-plain-text": ("verl-gke:wandbApiKey", "plain-wandb-key-value-1234",
                                 "verl-gke:wandbApiKey is set in plain text"),
    "alias-of-an-unknown-key": ("verl-gke:colours", "[*nets, *nets]", "verl-gke:colours is not a known key"),
    "merge-into-an-unknown-key": ("verl-gke:shape", "{<<: {a: 1}, b: 2}", "verl-gke:shape is not a known key"),
    "set-where-the-default-is-injected": ("verl-gke:gvnicCidr", "10.99.0.0/24",
                                          "accelerator l4 has no RDMA NICs"),
    "not-a-number": ("verl-gke:grpoLearningRate", "fast", "verl-gke:grpoLearningRate = 'fast': must be a number"),
    "yes-and-html-in-a-list": ("verl-gke:rewardPackages", "[yes, 'a<b&c>']", "verl-gke:rewardPackages"),
}


def gate_text() -> str:
    # `&nets` anchors the list the alias case reuses; the bare `rayHeadCpu` stands in for the dev file's key.
    text = with_lines(dev_text().replace("  verl-gke:rayHeadCpu: 2\n", ""),
                      {"verl-gke:masterAuthorizedNetworks": "&nets [203.0.113.0/24]"})
    return with_lines(text, {k: v for k, v, _ in GATE_CASES.values()})


def gate_run(runs: Runs) -> Preview:
    return runs.preview("gate", gate_text(), "dev")


@pytest.mark.parametrize("case", sorted(GATE_CASES))
def test_gate_refuses_under_the_real_cli_naming_the_key(runs, case):
    run = gate_run(runs)
    assert run.result.code != 0, run.result
    assert "invalid stack configuration" in run.errors() and GATE_CASES[case][2] in run.errors(), run.errors()


def test_gate_never_shows_a_secret_typed_in_plain_text(runs):
    """The CLI hands a plain-text wandbApiKey (and the list in hfToken) over unmarked: refused, the value unshown."""
    errors = gate_run(runs).errors()
    assert "plain-wandb-key-value" not in errors and "AbCdEfGhIj" not in errors, errors


def test_gate_refuses_before_any_resource_is_registered(runs):
    run = gate_run(runs)
    assert run.record is not None, run.result
    assert run.registered() == ["pulumi:pulumi:Stack"] and GCP_PLUGIN_MISSING not in run.errors()


def test_refused_stack_file_reads_offline_as_the_program_was_handed_it(runs):
    assert offline(gate_text()) == gate_run(runs).record


# --- refused by the CLI's own type check (pkg/workspace/config.go), before the program runs -------------------

TYPE_CASES = {  # case -> (key, YAML value, the declared type the CLI names)
    "yes-is-a-string": ("verl-gke:submitJob", "yes", "boolean"),
    "quoted-True-is-a-string": ("verl-gke:submitJob", "'True'", "boolean"),
    "bool-as-a-list": ("verl-gke:submitJob", "[true]", "boolean"),
    "count-as-a-quoted-float": ("verl-gke:gpuNodes", "'4.0'", "integer"),
    "count-as-a-float": ("verl-gke:gpuNodes", "4.5", "integer"),
    "count-with-a-newline": ("verl-gke:gpuNodes", '"2\\n"', "integer"),
    "count-beyond-int64": ("verl-gke:gpuNodes", "9223372036854775808", "integer"),
    "list-as-a-string": ("verl-gke:grpoExtraOverrides", "trainer.total_epochs=1", "array<string>"),
    "list-as-a-json-string": ("verl-gke:grpoExtraOverrides", "'[\"trainer.total_epochs=1\"]'", "array<string>"),
    "list-with-a-null": ("verl-gke:grpoExtraOverrides", "[trainer.total_epochs=1, ~]", "array<string>"),
    "list-with-a-number": ("verl-gke:grpoLogger", "[console, 1]", "array<string>"),
    "list-of-lists": ("verl-gke:rdmaCidrs", "[[10.0.0.0/24]]", "array<string>"),
    "string-as-a-list": ("verl-gke:model", "[a]", "string"),
    "string-as-a-map": ("verl-gke:model", "{name: x}", "string"),
}


@pytest.mark.parametrize("case", sorted(TYPE_CASES))
def test_cli_type_check_refuses_before_the_program_runs_and_so_does_the_reader(runs, case):
    key, value, type_ = TYPE_CASES[case]
    text = with_lines(dev_text(), {key: value, "gcp:project": PROJECT_ID})
    run = runs.preview(f"type-{case}", text)
    refusal = f"configuration key '{key.split(':', 1)[1]}' must be of type '{type_}'"
    assert run.result.code != 0 and run.record is None and refusal in run.result.text, run.result
    with pytest.raises(stack_file.StackFileError, match=re.escape(refusal)):
        stack_file.from_text(text, "dev", "Pulumi.dev.yaml")


# --- stack files the CLI cannot read at all --------------------------------------------------------------------

FILE_CASES = {  # case -> (stack file text, what the CLI says, what the reader says)
    "key-written-twice": (dev_text() + "  verl-gke:gpuNodes: 3\n",
                          'mapping key "verl-gke:gpuNodes" already defined at line',
                          'mapping key "verl-gke:gpuNodes" already defined at line'),
    "key-not-a-string": ("config:\n  1: one\n", "could not parse 1 as a configuration key",
                         "could not parse 1 as a configuration key"),
    "key-with-three-colons": ("config:\n  a:b:c:d: x\n", "could not parse a:b:c:d as a configuration key",
                              "could not parse a:b:c:d as a configuration key"),
    "infinite-number": (with_lines(dev_text(), {"verl-gke:gpuNodes": ".inf"}), "unsupported value: +Inf",
                        "verl-gke:gpuNodes: json: unsupported value"),
    "top-level-scalar": ("just some text\n", "expected project to be an object", "must be a mapping at the top level"),
    "config-a-list": ("config:\n  - gcp:project: p\n", "cannot unmarshal !!seq", "'config' must be a mapping"),
}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_a_stack_file_the_cli_cannot_read_is_refused_by_the_reader(runs, case):
    text, cli_says, reader_says = FILE_CASES[case]
    ws, _ = runs.workspace(f"file-{case}", text, "dev")
    result = ws.run("stack", "select", "dev", "--create")
    assert result.code != 0 and cli_says in result.text, result
    with pytest.raises(stack_file.StackFileError, match=re.escape(reader_says)):
        stack_file.from_text(text, "dev", "Pulumi.dev.yaml")


def test_a_timestamp_the_cli_hands_as_go_time_text_is_refused_by_the_gate_and_the_reader(runs):
    text = with_lines(dev_text(), {"verl-gke:model": "2024-01-02T03:04:05.5Z", "gcp:project": PROJECT_ID})
    run = runs.preview("timestamp", text)
    assert run.record["verl-gke:model"] == "2024-01-02 03:04:05.5 +0000 UTC", run.result
    assert "verl-gke:model = '2024-01-02 03:04:05.5 +0000 UTC'" in run.errors()
    with pytest.raises(stack_file.StackFileError, match="verl-gke:model: '2024-01-02T03:04:05.5Z' reads as a "
                                                          "timestamp"):
        stack_file.from_text(text, "dev", "Pulumi.dev.yaml")


# --- secrets: `pulumi config set --secret`, kept secret or refused ----------------------------------------------

SECRET_LINES = [argv for argv in README_ACCEPTED if "--secret" in argv]


def test_the_readme_sets_both_secrets_with_secret():
    assert sorted(argv[-2] for argv in SECRET_LINES) == ["hfToken", "wandbApiKey"]


def test_readme_secrets_reach_the_program_as_secrets_and_read_offline_as_secrets(runs):
    """The README's run (which passes the gate) sets hfToken and wandbApiKey with --secret."""
    run = readme_run(runs)
    assert run.record["verl-gke:hfToken"] == SECRET == run.record["verl-gke:wandbApiKey"], run.result
    reading = stack_file.from_text(run.stack_text, "dev", "Pulumi.dev.yaml")
    assert {"verl-gke:hfToken", "verl-gke:wandbApiKey"} <= set(reading.secret_keys)


# key -> the `pulumi config set` that marks it secret; each value is one the gate would refuse (and so show) if
# it read it: a refused secret is read as its key's default.
REFUSED_SECRETS = {
    "verl-gke:billingAccount": ["config", "set", "--secret", "billingAccount", "my-secret-account"],
    "verl-gke:grpoExtraOverrides": ["config", "set", "--path", "--secret", "grpoExtraOverrides[0]",
                                    "trainer.val_before_train=SecretOverrideNeverShown"],
    "verl-gke:namePrefix": ["config", "set", "--secret", "namePrefix", "Secret_Prefix"],
    "gcp:zone": ["config", "set", "--secret", "gcp:zone", "secret-zone-z"],
}


def secrets_refused_run(runs: Runs) -> Preview:
    return runs.preview("secrets-refused", dev_text(), "dev", [
        ["config", "set", "gcp:project", PROJECT_ID], ["config", "set", "budgetMonthly", "500"],
        *REFUSED_SECRETS.values()])


@pytest.mark.parametrize("key", sorted(REFUSED_SECRETS))
def test_a_secret_the_program_cannot_keep_is_refused_naming_the_key(runs, key):
    run = secrets_refused_run(runs)
    assert run.result.code != 0 and run.registered() == ["pulumi:pulumi:Stack"], run.result
    assert f"{key} is set as a secret (--secret), which the program cannot keep" in run.errors(), run.errors()


def test_the_offline_plan_refuses_the_same_secrets_from_the_cli_written_stack_file(runs, tmp_path, capsys):
    from tools import plan

    run = secrets_refused_run(runs)
    assert offline(run.stack_text) == run.record
    (tmp_path / "Pulumi.dev.yaml").write_text(run.stack_text)
    assert plan.main(["--stack", "dev", "--config", str(tmp_path / "Pulumi.dev.yaml"), "--out",
                      str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert all(f"{key} is set as a secret" in err for key in REFUSED_SECRETS), err


def test_a_ray_head_that_does_not_fit_its_node_is_refused_under_the_real_cli(runs):
    """Node fit runs in the gate `pulumi preview` runs, not only in the offline plan (after every other rule
    passed, hence a stack file of its own rather than a row of GATE_CASES)."""
    text = with_lines(dev_text(), {"gcp:project": PROJECT_ID, "verl-gke:rayHeadCpu": "7"})
    run = runs.preview("head-fit", text, "dev")
    assert run.result.code != 0, run.result
    assert "invalid stack configuration" in run.errors() and "verl-gke:rayHeadCpu = 7" in run.errors(), run.errors()
