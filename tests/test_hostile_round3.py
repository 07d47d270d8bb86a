"""Hostile input, round three (issue 45 items 3-6): no credential in a plain key, no adopted bucket deleted,
ASCII numbers, Cloud Storage's bucket naming in full, no echo of a token, no traceback on an odd path.

Every refusal through the plan: exit 2, the key named, nothing written, the value nowhere in what it printed.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json

import pulumi
import pulumi.runtime.config as runtime_config
import pytest

from catalog import naming
from components.problems import ArgsError
from components.storage import TrainingStorage, TrainingStorageArgs
from stacks import compose
from stacks import config as stack_config
from stacks.keys import KEYS, OWN_RULES, REFUSED
from tests import test_hostile_input as hostile
from tests.stack_helpers import BASE
from tools import mocking

sandbox = hostile.sandbox  # the fixture: the stack file's folder (and the default plan root), the resources registered
TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"  # a Hugging Face token's shape
WANDB = "abcdef0123456789abcdef0123456789abcdef01"  # a W&B key's: 40 hex characters (and a DNS-1035 label)
COMMIT = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"  # a git or Hub commit id: the same shape


def refused_by_the_plan(sandbox, content: str, named: str, *, hidden: str = "") -> str:
    """Plan `content` as a stack file: exit 2 naming `named`, nothing written, `hidden` nowhere in the output."""
    tmp_path, registered = sandbox
    path = hostile.write_stack(tmp_path, content)
    rc, text = hostile.run_main(["--stack", "hostile", "--config", str(path), "--out", str(tmp_path / "out")])
    hostile.assert_refused(rc, text, named, tmp_path, registered)
    assert not hidden or hidden not in text, text
    return text


def gate_lines(**changes: str) -> list[str]:
    """The gate's problem lines for BASE with `changes` (as the CLI hands them: strings); [] when it passes."""
    try:
        stack_config.load({**BASE, **changes}, "hostile")
    except stack_config.ConfigError as err:
        return err.problems
    return []


def gate_problems(**changes: str) -> list[str]:
    """The gate's problem lines for a config it must refuse."""
    lines = gate_lines(**changes)
    assert lines, f"the gate took {changes}"
    return lines


# --- item 3: a credential typed into a plain key ----------------------------------------------------------

PLAIN_KEY_CREDENTIALS = {  # key -> (the stack file's lines, the secret key the message points to)
    "image-tag-token": ("verl-gke:image", {"verl-gke:image": f"verlai/verl:{TOKEN}"}, "hfToken"),
    "namespace-wandb-key": ("verl-gke:namespace", {"verl-gke:namespace": WANDB}, "wandbApiKey"),
    "model-token": ("verl-gke:model", {"verl-gke:model": f"someone/{TOKEN}"}, "hfToken"),
    "reservation-wandb-key": ("verl-gke:reservation", {"verl-gke:capacity": "reservation",
                                                       "verl-gke:reservation": WANDB}, "wandbApiKey"),
    "reward-function-token": ("verl-gke:rewardFunction", {"verl-gke:rewardFunction": TOKEN}, "hfToken"),
}


@pytest.mark.parametrize("case", sorted(PLAIN_KEY_CREDENTIALS))
def test_a_credential_in_a_plain_key_is_refused_without_echo(sandbox, case):
    key, lines, secret = PLAIN_KEY_CREDENTIALS[case]
    value = next(v for v in lines.values() if TOKEN in v or WANDB in v)
    text = refused_by_the_plan(sandbox, hostile.stack_text(**lines), key,
                               hidden=TOKEN if TOKEN in value else WANDB)
    assert f"{key} = <not shown: it looks like" in text and "must not hold a credential" in text, text
    assert f"`pulumi config set --secret {secret} <value>`" in text


@pytest.mark.parametrize("shape,secret", [(TOKEN, "hfToken"), (WANDB, "wandbApiKey")])
def test_every_non_secret_key_refuses_a_credential(shape, secret):
    """Every row but the secrets and the overrides (judged item by item under their Hydra keys, recipe rules)."""
    plain = [k for k in KEYS if not k.secret and k.credentials != OWN_RULES]
    for k in plain:
        if shape == WANDB and k.credentials != REFUSED:
            continue  # 40 hex characters are a commit or a name there (the next test)
        value = json.dumps([shape]) if k.type == "array" else f"x-{shape}"
        lines = gate_problems(**{k.full: value})
        mine = [line for line in lines if line.startswith(f"{k.full} = <not shown") and "must not hold a credential"
                in line and f"--secret {secret} " in line]
        assert mine, (k.full, lines)
        assert not any(shape in line for line in lines), lines


@pytest.mark.parametrize("key,value", [
    ("verl-gke:image", f"example/verl:{COMMIT}"),  # CI tags an image with its commit
    ("verl-gke:image", "verlai/verl@sha256:" + "0123456789abcdef" * 4),  # a digest: 64 hex characters, not 40
    ("verl-gke:bucketName", COMMIT),  # a bucket named by a digest
    ("verl-gke:dataTrainFile", f"hub/datasets--me--gsm8k/snapshots/{COMMIT}/train.parquet"),  # a Hub cache path
])
def test_a_commit_id_where_a_key_holds_one_is_not_a_credential(key, value):
    changes = {key: value, "verl-gke:dataValFile": "val.parquet"} if key == "verl-gke:dataTrainFile" else {key: value}
    lines = gate_lines(**changes)
    assert not any("credential" in line for line in lines), lines


@pytest.mark.parametrize("secret", ["hfToken", "wandbApiKey"])
def test_a_secret_key_in_plain_text_is_refused_by_the_plan(sandbox, secret):
    """`hfToken: hf_...` in a stack file (tracked by git): the plan had taken it silently."""
    value = TOKEN if secret == "hfToken" else WANDB
    text = refused_by_the_plan(sandbox, hostile.stack_text(**{f"verl-gke:{secret}": value}), f"verl-gke:{secret}",
                               hidden=value)
    assert f"verl-gke:{secret} is set in plain text" in text
    assert f"`pulumi config set --secret {secret} <value>`" in text


def test_a_secret_key_the_cli_hands_over_in_plain_text_is_refused_under_pulumi_up():
    """What `pulumi up` hands the program for a plain-text hfToken: the value without the key in
    PULUMI_CONFIG_SECRET_KEYS. The same value marked secret passes."""
    raw = {**BASE, "verl-gke:hfToken": TOKEN}

    def from_the_cli(secret_keys: list[str]) -> stack_config.StackConfig:
        def load() -> stack_config.StackConfig:
            runtime_config.CONFIG.set({})
            runtime_config._SECRET_KEYS.set(set())
            return stack_config.from_pulumi("hostile")
        with pytest.MonkeyPatch.context() as env:
            env.setenv("PULUMI_CONFIG", json.dumps(raw))
            env.setenv("PULUMI_CONFIG_SECRET_KEYS", json.dumps(secret_keys))
            return contextvars.copy_context().run(load)

    with pytest.raises(stack_config.ConfigError) as err:
        from_the_cli([])
    assert "verl-gke:hfToken is set in plain text" in str(err.value) and TOKEN not in str(err.value)
    assert from_the_cli(["verl-gke:hfToken"]).has_hf_token


def test_a_plain_text_secret_registers_nothing_under_the_program():
    seen = mocking.Run()
    with pytest.raises(pulumi.RunError) as err:
        mocking.run(compose.program, {**BASE, "verl-gke:wandbApiKey": WANDB}, "hostile", [], result=seen)
    assert "verl-gke:wandbApiKey is set in plain text" in str(err.value) and WANDB not in str(err.value)
    assert seen.resources == []


# --- item 4: a bucket the stack did not create --------------------------------------------------------------


def test_adopting_a_bucket_and_deleting_it_on_destroy_is_refused(sandbox):
    text = refused_by_the_plan(sandbox, hostile.stack_text(**{"verl-gke:bucketName": "kept-bucket-1",
                                                               "verl-gke:bucketDeleteOnDestroy": "true"}),
                               "verl-gke:bucketDeleteOnDestroy = True: must be false with verl-gke:bucketName")
    assert "would delete it with everything in it" in text


def _storage(**changes) -> TrainingStorageArgs:
    return dataclasses.replace(TrainingStorageArgs(project_id="alone-project-1", project_number="1",
                                                   location="us-central1", bucket_prefix="alone-data",
                                                   namespace="alone"), **changes)


def test_the_storage_component_never_deletes_an_adopted_bucket():
    args = _storage(existing_bucket="kept-bucket-1", delete_on_destroy=True)
    assert [p.key for p in args.problems()] == ["delete_on_destroy"]
    seen = mocking.Run()
    with pytest.raises(ArgsError) as err:
        mocking.run(lambda: TrainingStorage("storage", args), {"gcp:project": "alone-project-1"}, "alone",
                    result=seen)
    assert "TrainingStorageArgs.delete_on_destroy = True: must be False with existing_bucket" in str(err.value)
    assert seen.resources == []


# --- item 5: numbers in ASCII, bucket names as Cloud Storage takes them ------------------------------------

_ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def test_every_number_key_takes_ascii_digits_only():
    """"١" was a learning rate of 1.0: Python's float() reads other scripts' digits."""
    numbers = [k for k in KEYS if k.type == "integer" or k.number]
    assert {"grpoLearningRate", "gpuNodes"} <= {k.name for k in numbers}
    for k in numbers:
        value = str(k.default).translate(_ARABIC_INDIC)  # the default, in Arabic-Indic digits
        lines = gate_problems(**{k.full: value})
        assert any(line.startswith(f"{k.full} = {value!r}: must be") for line in lines), (k.full, lines)


@pytest.mark.parametrize("value", ["١", "１e-6", "1_0e-7", "٠.٠٠٠١"])
def test_a_learning_rate_in_other_digits_is_refused_by_the_plan(sandbox, value):
    text = refused_by_the_plan(sandbox, hostile.stack_text(**{"verl-gke:grpoLearningRate": json.dumps(value)}),
                               "verl-gke:grpoLearningRate")
    assert "in ASCII digits" in text


@pytest.mark.parametrize("key,value", [
    ("verl-gke:gkeVersion", "1.٣٣"), ("verl-gke:cpuMachineType", "c2-standard-١٦"),
    ("verl-gke:rayVersion", "٢.49.2"), ("verl-gke:verlVersion", "v٠.6.1"), ("verl-gke:image", "verlai/verl:vllm٠١١"),
])
def test_other_digits_in_versions_and_names_are_refused(key, value):
    assert any(line.startswith(f"{key} = {value!r}: must be") for line in gate_problems(**{key: value}))


@pytest.mark.parametrize("prefix", ["g00gle", "my-goog1e", "x-9oogle", "gogle-ml", "my-gooogle"])
def test_a_name_prefix_that_makes_a_google_like_bucket_is_refused(sandbox, prefix):
    text = refused_by_the_plan(sandbox, hostile.stack_text(**{"verl-gke:namePrefix": prefix}),
                               f"verl-gke:namePrefix = {prefix!r}: makes the bucket name {prefix}-data-<suffix>")
    assert "https://cloud.google.com/storage/docs/buckets#naming" in text


@pytest.mark.parametrize("name", ["g00gle-data", "kept-g0ogle", "data-googel-x"])
def test_a_google_like_bucket_to_adopt_is_refused(name):
    lines = gate_problems(**{"verl-gke:bucketName": name})
    assert any(line.startswith(f"verl-gke:bucketName = {name!r}: must not contain 'google'") for line in lines), lines


@pytest.mark.parametrize("name", ["verl-dev-604613d9", "verl-dev-d6c6001e", "backup-20100613", "logs-2009-0613",
                                  "data-60013"])
def test_digits_that_only_read_as_google_are_no_misspelling(name):
    """The stack's own `<prefix>-<8 hex>` bucket and dated names: digit runs, or windows across a '-', that the
    look-alike table reads as "google" are adoptable (a stack told to adopt its own bucket must be able to)."""
    cfg = stack_config.load({**BASE, "verl-gke:bucketName": name}, "hostile")
    assert cfg.bucket_name == name


@pytest.mark.parametrize("name", ["my_bucket", "data.example.com", ".".join(["a" * 63] * 3) + "." + "b" * 30])
def test_a_bucket_name_cloud_storage_takes_can_be_adopted(name):
    cfg = stack_config.load({**BASE, "verl-gke:bucketName": name}, "hostile")
    assert cfg.bucket_name == name


@pytest.mark.parametrize("name,why", [
    ("ab", "3-63"), ("a" * 64, "3-63"), ("a." + "b" * 64, "each dot-separated part 1-63"),
    (".".join(["a" * 63] * 3) + "." + "b" * 31, "with dots up to 222"), ("a..b", "each dot-separated part 1-63"),
    ("-ab", "starting and ending"), ("ab_", "starting and ending"), ("Ab1", "lowercase"), ("a b", "lowercase"),
    ("192.168.5.4", "IP address in dotted-decimal"), ("goog-data", "begin with 'goog'"),
    ("my-google", "'google'"), ("g00gle", "'google'"), ("goog1e-x", "'goog'"), ("gogle", "'google'"),
    ("my-go-ogle", "'google'"),
])
def test_bucket_naming_is_cloud_storages_in_full(name, why):
    """https://cloud.google.com/storage/docs/buckets#naming, rule by rule."""
    problem = naming.bucket_name_problem(name)
    assert problem is not None and why in problem, (name, problem)


# --- item 6: a token typed into a key is not repeated --------------------------------------------------------


@pytest.mark.parametrize("lines", [{"verl-gke:model": TOKEN}, {"verl-gke:model": f"{TOKEN}/x"},
                                   {"verl-gke:capacity": "reservation", "verl-gke:reservation": TOKEN}],
                         ids=["model", "model-namespace", "reservation"])
def test_a_token_typed_as_the_model_or_reservation_is_not_echoed(sandbox, lines):
    key = [k for k, v in lines.items() if TOKEN in v][0]
    refused_by_the_plan(sandbox, hostile.stack_text(**lines), key, hidden=TOKEN)


# --- a path no file system takes ------------------------------------------------------------------------


@pytest.mark.parametrize("path,why", [("x" * 300 + ".parquet", "File name too long"),
                                      ("~no-such-user-verl/train.parquet", "home directory")])
def test_a_data_path_no_file_system_takes_is_a_problem_naming_the_key(path, why):
    """A 300-character dataTrainFile raised OSError (file name too long): a traceback under `pulumi up`."""
    lines = gate_problems(**{"verl-gke:dataTrainFile": path, "verl-gke:dataValFile": "val.parquet"})
    assert any(line.startswith("verl-gke:dataTrainFile = ") and "is not a path this machine can look up" in line
               and why in line for line in lines), lines


def test_a_data_path_too_long_is_refused_by_the_plan(sandbox):
    refused_by_the_plan(sandbox, hostile.stack_text(**{"verl-gke:dataTrainFile": "x" * 300,
                                                        "verl-gke:dataValFile": "v.parquet"}),
                        "verl-gke:dataTrainFile")


@pytest.mark.parametrize("token", [
    "sk-proj-" + "Ab1" * 16,  # OpenAI project key
    "sk-ant-api03-" + "Xy9_" * 10,  # Anthropic
    "ya29.a0AfH6SM" + "Bc2-" * 8,  # Google OAuth access token
    "xoxb-1234567890-" + "AbCd" * 6,  # Slack bot token
])
def test_other_well_known_tokens_in_a_plain_key_are_refused_without_echo(token):
    lines = gate_problems(**{"verl-gke:namespace": f"x-{token}"})
    assert any(line.startswith("verl-gke:namespace = <not shown") for line in lines), lines
    assert not any(token in line for line in lines), lines


@pytest.mark.parametrize("key,value", [
    ("gcp:accessToken", "ya29.a0AfH6SMBxa0AfH6SMBxa0AfH6SMBxa0AfH6SMBx"),
    ("gcp:credentials", '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nMIIE"}'),
    ("gcp:impersonateServiceAccount", TOKEN),
    ("pulumi:tags", json.dumps({"a": TOKEN})),
])
def test_a_credential_in_a_provider_key_in_plain_text_is_refused_without_echo(key, value):
    lines = gate_problems(**{key: value})
    assert any(line.startswith(f"{key} = [secret]: must not hold a credential in plain text") for line in lines), lines
    assert not any(value in line or TOKEN in line or "ya29." in line for line in lines), lines


def test_a_provider_credential_set_as_a_secret_is_taken():
    cfg = stack_config.load({**BASE, "gcp:accessToken": "ya29.a0AfH6SMBxa0AfH6SMBxa0AfH6SMBx"}, "hostile",
                            secret_keys=["gcp:accessToken"])
    assert cfg.project
