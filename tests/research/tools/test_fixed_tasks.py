"""research.tools.fixed_tasks: training on the same tasks every step, with the advantages as computed or altered."""

import json

import pytest
import torch
from saved_run_testkit import TINY, saved_tiny_model

from research.tools import fixed_tasks
from verl_mas.local.config import LocalTrainConfig, config_json, read_config
from verl_mas.overrides import apply_overrides
from verl_mas.sample import Sample


@pytest.fixture(scope="module")
def saved_config(tmp_path_factory):
    """The config.json of a run that starts from a tiny saved model."""
    folder = tmp_path_factory.mktemp("fixed_tasks")
    path = folder / "config.json"
    path.write_text(config_json(saved_tiny_model(folder)))
    return path


def test_every_step_trains_on_the_same_tasks_unless_fresh(saved_config):
    config = read_config(saved_config)
    same = fixed_tasks.FixedTasksRun(config, fresh=False, mode="computed")
    assert [t.uid for t in same.train_tasks(0)] == [t.uid for t in same.train_tasks(7)]
    fresh = fixed_tasks.FixedTasksRun(config, fresh=True, mode="computed")
    assert [t.uid for t in fresh.train_tasks(0)] == [t.uid for t in same.train_tasks(0)]
    assert not {t.uid for t in fresh.train_tasks(1)} & {t.uid for t in fresh.train_tasks(0)}


def test_negated_and_shuffled_advantages_are_the_computed_ones_altered(saved_config):
    config = read_config(saved_config)
    rewards = [1.0, 0.0, 3.0, 2.0]
    samples = [Sample("t0", "plan", 0, i, "shared", (1,), (2,), None, r, 0.0, r, False) for i, r in enumerate(rewards)]
    computed = fixed_tasks.FixedTasksRun(config, fresh=False, mode="computed").compute_advantages(samples)
    # one group of four: (r - 1.5) / std, the sample std of 1, 0, 3, 2 being sqrt(5/3)
    assert computed.tolist() == pytest.approx([(r - 1.5) / (5 / 3) ** 0.5 for r in rewards], rel=1e-4)
    negated = fixed_tasks.FixedTasksRun(config, fresh=False, mode="negated").compute_advantages(samples)
    assert torch.equal(negated, -computed)
    shuffled = fixed_tasks.FixedTasksRun(config, fresh=False, mode="shuffled").compute_advantages(samples)
    assert sorted(shuffled.tolist()) == sorted(computed.tolist()) and not torch.equal(shuffled, computed)


def test_main_writes_each_steps_record_and_the_table(saved_config, tmp_path, capsys):
    out = tmp_path / "fixed_tasks.json"
    fixed_tasks.main([str(saved_config), "--lr", "1e-3", "--steps", "6", "--out", str(out)])
    written = json.loads(out.read_text())
    (run,) = written["results"]
    assert written["command"].startswith("python -m research.tools.fixed_tasks ") and run["lr"] == 1e-3
    success = [step["success"] for step in run["steps"]]
    assert len(success) == 6 and all(0.0 <= value <= 1.0 for value in success)
    # six steps: the first five are steps 1-5, the last five steps 2-6
    first, last = sum(success[:5]) / 5, sum(success[1:]) / 5
    assert f"| 0.001 | computed | fixed | 6 | {first:.3f} -> {last:.3f} |" in capsys.readouterr().out


def test_a_config_without_a_saved_model_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(config_json(apply_overrides(LocalTrainConfig(), TINY)))
    with pytest.raises(SystemExit):
        fixed_tasks.main([str(path), "--steps", "5"])
