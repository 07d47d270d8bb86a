"""Issue 43 items 3 and 5: a run that saves nothing cannot be merged, and the save cadence follows the
capacity's interruption rate and the save's cost (stacks.checkpoints.cadence), shown in the plan."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from catalog import capacity
from recipe import sizing
from stacks import checkpoints, config, derived
from stacks.derived import run_paths
from tools import plan

BASE = {"gcp:project": "test-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b"}
_VERL = importlib.util.find_spec("verl")  # the package without running its __init__ (which imports torch)


def load(**keys: str) -> config.StackConfig:
    return config.load({**BASE, **{f"verl-gke:{k}": v for k, v in keys.items()}}, "s")


def stack(name: str) -> config.StackConfig:
    raw, _ = plan.read_stack_file(plan.ROOT / f"Pulumi.{name}.yaml")
    return config.load(raw, name, allow_placeholder_project=True)


def test_verl_saves_nothing_not_even_the_last_step_without_a_positive_save_freq():
    """The premise of the refusal below, read in verl 0.6.1's own trainer: every save, the last step's too,
    sits under `save_freq > 0`."""
    if _VERL is None or not _VERL.submodule_search_locations:
        pytest.skip("verl is not installed: pip install --no-deps -r requirements-verl-test.txt")
    source = Path(_VERL.submodule_search_locations[0]) / "trainer" / "ppo" / "ray_trainer.py"
    fit = source.read_text().split("def fit(self):", 1)[1]
    guard = re.search(r"if self\.config\.trainer\.save_freq > 0 and \(\s*is_last_step or", fit)
    assert guard and fit.count("self._save_checkpoint()") == 1 and guard.start() < fit.index("self._save_checkpoint()")


def test_never_saving_with_the_merge_is_refused_naming_both_keys():
    with pytest.raises(config.ConfigError) as err:
        load(grpoSaveFreq="-1")
    text = str(err.value)
    assert "verl-gke:grpoSaveFreq = -1" in text and "verl-gke:jobMergeModel" in text, text
    assert load(grpoSaveFreq="-1", jobMergeModel="false").grpo.save_freq == -1  # no merge: the user's choice


def test_spot_b200_saves_mid_run_with_model_only_checkpoints():
    """b200 ran spot with one save at the end: a preemption restarted it from step 0. Now it saves about
    every 20 minutes of training, model-only (a third of the 393 GB), and the job says so to verl."""
    cfg = stack("b200")
    z = sizing.run_sizing(cfg)
    assert cfg.capacity.kind == capacity.SPOT and cfg.grpo.save_contents == "model"
    assert 1 <= cfg.grpo.save_freq < z.total_steps
    c = checkpoints.stack_cadence(cfg)
    assert c.derived and c.saves >= 2 and c.lost_minutes < z.est_run_hours * 60 / 4
    overrides = derived.of(cfg).job.spec.trainer.values()
    assert overrides["actor_rollout_ref.actor.checkpoint.save_contents"] == "[model,extra]"
    assert overrides["trainer.save_freq"] == str(cfg.grpo.save_freq)


def test_rare_interruptions_save_less_often_and_keep_the_optimizer():
    """Reserved capacity is interrupted by host maintenance only (about every two weeks): full checkpoints,
    and fewer saves than spot's for the same run."""
    spot = load()
    reserved = load(capacity="reservation", reservation="my-reservation")
    assert reserved.grpo.save_contents == "full" and spot.grpo.save_contents == "model"
    assert reserved.grpo.save_freq > spot.grpo.save_freq
    assert checkpoints.stack_cadence(reserved).expected_interruptions < \
        checkpoints.stack_cadence(spot).expected_interruptions


def test_more_nodes_are_interrupted_more_often_and_save_more_often():
    """Losing any GPU node restarts every rank: the run's interruption rate grows with its nodes."""
    two, four = load(gpuNodes="2"), load(gpuNodes="4")
    c2, c4 = checkpoints.stack_cadence(two), checkpoints.stack_cadence(four)
    assert c4.group_interruption_hours == c2.group_interruption_hours / 2
    assert c4.interval_minutes < c2.interval_minutes


def test_a_save_freq_or_contents_the_stack_sets_wins():
    cfg = load(grpoSaveFreq="7", grpoSaveContents="full")
    assert (cfg.grpo.save_freq, cfg.grpo.save_contents) == (7, "full")
    assert not checkpoints.stack_cadence(cfg).derived


@pytest.mark.parametrize("moved", [{"capacity": capacity.FLEX_START},
                                   {"capacity": capacity.RESERVATION, "reservation": "my-reservation"}])
def test_a_spot_run_moved_to_another_capacity_keeps_its_checkpoint_folder(moved):
    """grpoSaveContents auto turns full off spot: the folder (the run key) stays, so the run resumes there
    (the supervisor loads model-only from a checkpoint without optimizer shards)."""
    spot, other = load(), load(**moved)
    assert (spot.capacity.kind, spot.grpo.save_contents, other.grpo.save_contents) == (capacity.SPOT, "model", "full")
    assert run_paths(other).checkpoint_dir == run_paths(spot).checkpoint_dir


def test_save_contents_is_not_an_extra_override():
    with pytest.raises(config.ConfigError, match="comes from verl-gke:grpoSaveContents"):
        load(**{"grpoExtraOverrides": '["actor_rollout_ref.actor.checkpoint.save_contents=[model]"]'})


def test_every_capacity_type_has_an_interruption_rate_with_its_basis():
    assert set(capacity.INTERRUPTIONS) == set(capacity.CAPACITIES)
    for kind, rate in capacity.INTERRUPTIONS.items():
        assert rate.node_hours > 0 and ("https://" in rate.basis), kind
        assert rate.basis.startswith("ASSUMPTION") or "docs.cloud.google.com" in rate.basis, kind


def test_the_plan_shows_the_cadence_and_the_work_a_preemption_loses():
    cfg = stack("b200")
    text = plan.report(plan.run_figures(cfg))
    c = checkpoints.stack_cadence(cfg).as_dict()
    assert f"cadence     every {cfg.grpo.save_freq} steps (derived: Young's optimum" in text, text
    assert f"each redoes ~{c['lost_minutes']} min of training" in text and "ASSUMPTION: one preemption" in text


def test_the_docs_state_b200s_cadence_as_the_plan_derives_it():
    from tests import docs

    cfg = stack("b200")
    c, z = checkpoints.stack_cadence(cfg), sizing.run_sizing(cfg)
    readme = " ".join(docs.text().split())
    line = (f"b200 (spot, {cfg.gpu_nodes} nodes) then saves every {c.save_freq} of its {z.total_steps} steps, "
            f"~{round(c.save_seconds)} s each, and a preemption redoes ~{round(c.lost_minutes)} min of training")
    assert line in readme, line
