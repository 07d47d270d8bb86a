"""catalog.problems: the one shape of a bad setting, and what its message may show."""

from __future__ import annotations

import copy

from catalog.problems import NO_VALUE, SECRET, AsText, ConfigError, Problem, named
from tests.stack_helpers import BASE

TOKEN = "hf_" + "Ab1" * 12  # a Hugging Face token's shape


def test_a_problem_names_its_key_value_and_what_is_allowed():
    assert str(Problem("verl-gke:gpuNodes", "must be an integer >= 1", 0)) == \
        "verl-gke:gpuNodes = 0: must be an integer >= 1"


def test_a_problem_about_the_key_itself_reads_as_one_phrase():
    assert str(Problem("gcp:zone", "is not set: the zone")) == "gcp:zone is not set: the zone"
    assert str(Problem("verl-gke:rewardFile", "(reward.py): failed to import")) == \
        "verl-gke:rewardFile (reward.py): failed to import"
    assert str(Problem("verl-gke:grpoExtraOverrides", "'x' must look like key=value")) == \
        "verl-gke:grpoExtraOverrides: 'x' must look like key=value"


def test_a_credential_shaped_value_is_never_shown():
    line = str(Problem("verl-gke:model", "must be a Hugging Face model id", TOKEN))
    assert TOKEN not in line
    assert line == "verl-gke:model = <not shown: it looks like a Hugging Face token (hf_...)>: must be a Hugging " \
                   "Face model id"
    assert TOKEN not in str(Problem("verl-gke:rdmaCidrs", "must be a CIDR", ["10.0.0.0/24", TOKEN]))


def test_a_withheld_value_shows_as_secret():
    assert str(Problem("verl-gke:hfToken", "must be one string", "[1, 2]").withheld()) == \
        "verl-gke:hfToken = [secret]: must be one string"
    assert Problem("k", "is not set").withheld() == Problem("k", "is not set")  # nothing to withhold


def test_a_long_value_is_cut_short():
    line = str(Problem("verl-gke:namespace", "must be a DNS label", "x" * 10_000))
    assert len(line) < 200 and "(10000 characters)" in line


def test_renamed_shows_every_named_setting_under_the_other_naming():
    found = Problem("rollout_n", f"with {named('train_batch_size')} = 8", 1)
    renamed = found.renamed(lambda field: f"key:{field}")
    assert renamed.key == "key:rollout_n"
    assert str(renamed) == "key:rollout_n = 1: with key:train_batch_size = 8"
    assert str(found) == "rollout_n = 1: with train_batch_size = 8"


def test_a_copied_problem_still_has_no_value():
    """The dataset's readings are deep-copied out of a cache: a copy of "no value" is still no value."""
    found = copy.deepcopy(Problem("verl-gke:rewardFile", "(reward.py): failed to import"))
    assert not found.has_value and found.value == NO_VALUE
    assert str(found) == "verl-gke:rewardFile (reward.py): failed to import"


def test_a_value_shown_as_text_is_not_escaped():
    shown = Problem("tensor_parallel_size", "set it", AsText("0 (auto)"))
    assert str(shown) == "tensor_parallel_size = 0 (auto): set it"
    assert repr(SECRET) == "[secret]"


def test_the_error_carries_every_problem_and_prints_each_line():
    found = [Problem("a", "must be x", 1), Problem("b", "is not set")]
    err = ConfigError(found)
    assert err.found == tuple(found)
    assert err.problems == ["a = 1: must be x", "b is not set"]
    assert str(err) == "invalid stack configuration:\n  - a = 1: must be x\n  - b is not set"
    assert str(ConfigError(found[:1], "preflight checks failed")).startswith("preflight checks failed:\n  - a = 1")


def test_the_gate_never_echoes_a_token_typed_into_a_plain_key():
    """A token typed as the model id is refused naming the key; the message does not repeat it."""
    from stacks import config

    try:
        config.load({**BASE, "verl-gke:model": TOKEN}, "b200")
    except ConfigError as err:
        assert any(p.startswith("verl-gke:model = <not shown: it looks like a Hugging Face token")
                   for p in err.problems), err.problems
        assert TOKEN not in str(err), str(err)
    else:
        raise AssertionError("a token as the model id must be refused")
