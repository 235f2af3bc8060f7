"""research.tools.update_direction: one rollout, one update per rate, log-prob changes by advantage sign."""

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch
from saved_run_testkit import TINY, saved_tiny_model

from research.tools import update_direction
from verl_mas.local.config import LocalTrainConfig, config_json
from verl_mas.overrides import apply_overrides


@pytest.mark.parametrize("router", ["shared", "per_role"])
def test_a_tiny_rate_moves_next_to_nothing_and_a_large_one_moves_the_samples(tmp_path, monkeypatch, router):
    config = saved_tiny_model(tmp_path, router)
    saved = tmp_path / "config.json"
    saved.write_text(config_json(dataclasses.replace(config, norm_adv_by_std=False)))
    asked = []

    # an untrained model's rewards are all alike (zero advantages): give every other sample +1 and the rest -1
    def alternating(samples, grouping, norm_adv_by_std):
        asked.append(norm_adv_by_std)
        return torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(samples))])

    monkeypatch.setattr(update_direction, "sample_advantages", alternating)
    out = tmp_path / "update_direction.json"
    update_direction.main([str(saved), "--lr", "1e-12", "0.05", "--tasks", "2", "--out", str(out)])
    assert asked == [False]  # one rollout, scored as the saved config says
    still, moved = json.loads(out.read_text())["results"]
    assert still["sampler_gap"] < 1e-4  # the sampler's log-probs are the trainer's
    assert len(moved["roles"]) == 2  # plan and tool, on one model or two
    for row in still["roles"]:
        assert abs(row["mean_change_positive"]) < 1e-6 and abs(row["mean_change_negative"]) < 1e-6
    for row in moved["roles"]:  # the update raises what it rewards relative to what it penalises
        assert row["positive"] and row["negative"]
        assert row["mean_change_positive"] > row["mean_change_negative"] + 1e-3
    by_reward = still["advantage_by_local_reward"]
    assert by_reward == moved["advantage_by_local_reward"]  # one rollout for every rate
    # every trained sample is in exactly one (role, turn, local reward) cell
    assert sum(row["samples"] for row in by_reward) == sum(row["samples"] for row in still["roles"])


def test_a_config_without_a_saved_model_is_refused(tmp_path):
    saved = tmp_path / "config.json"
    saved.write_text(config_json(apply_overrides(LocalTrainConfig(), TINY)))
    with pytest.raises(ValueError, match="model.path is empty"):
        update_direction.updates(saved, [1e-3], 2)


def test_role_rows_split_by_advantage_sign():
    from verl_mas.sample import Sample

    def sample(role: str) -> Sample:
        return Sample("t", role, 0, 0, "p", (1,), (2,), None, 0.0, 0.0, 0.0, False)

    samples = [sample("a"), sample("a"), sample("a"), sample("b")]
    rows = update_direction.role_rows(samples, torch.tensor([1.0, -1.0, 0.0, 2.0]), torch.tensor([0.5, -2.0, 9.0, 1.5]))
    assert rows == [
        {
            "role": "a",
            "samples": 3,
            "positive": 1,
            "negative": 1,
            "mean_change_positive": 0.5,
            "mean_change_negative": -2.0,
        },
        {
            "role": "b",
            "samples": 1,
            "positive": 1,
            "negative": 0,
            "mean_change_positive": 1.5,
            "mean_change_negative": None,
        },
    ]  # a zero advantage (the 9.0) is in neither mean


def test_advantage_by_local_reward_by_hand():
    from verl_mas.sample import Sample

    def sample(role: str, turn: int, local: float) -> Sample:
        return Sample("t", role, turn, 0, "p", (1,), (2,), None, 0.0, local, local, False)

    samples = [sample("b", 0, 0.0), sample("a", 1, -0.5), sample("b", 0, 0.0), sample("b", 0, 1.0), sample("a", 0, 0.0)]
    rows = update_direction.advantage_by_local_reward(samples, torch.tensor([0.5, -1.0, 0.25, 2.0, -3.0]))
    assert rows == [
        {"role": "a", "turn": 0, "local_reward": 0.0, "samples": 1, "mean_advantage": -3.0},
        {"role": "a", "turn": 1, "local_reward": -0.5, "samples": 1, "mean_advantage": -1.0},
        {"role": "b", "turn": 0, "local_reward": 0.0, "samples": 2, "mean_advantage": 0.375},
        {"role": "b", "turn": 0, "local_reward": 1.0, "samples": 1, "mean_advantage": 2.0},
    ]  # the same local reward in another role or turn is another cell
    with pytest.raises(ValueError):
        update_direction.advantage_by_local_reward(samples, torch.tensor([0.5]))  # one advantage per sample, or nothing


def test_resampling_runs_end_to_end_on_a_real_tiny_run(tmp_path):
    config = saved_tiny_model(tmp_path, "shared")
    saved = tmp_path / "config.json"
    saved.write_text(config_json(config))
    results = update_direction.updates(saved, [0.05, 1e-12], 3, resample=4)
    for result in results:
        assert result["resample"] == 4
        assert [row["role"] for row in result["first_turn_reward"]] == ["plan", "tool"]
        assert all(
            row["tasks"] == 3 and row["judged_before"] == row["judged_after"] == 12
            for row in result["first_turn_reward"]
        )
    assert "judged before / after" in update_direction.report(results)


def test_before_is_the_saved_model_and_each_after_is_that_rates_updated_model(tmp_path, monkeypatch):
    config = saved_tiny_model(tmp_path, "shared")
    saved = tmp_path / "config.json"
    saved.write_text(config_json(dataclasses.replace(config, norm_adv_by_std=False)))
    monkeypatch.setattr(
        update_direction,
        "sample_advantages",
        lambda samples, *_: torch.tensor([(-1.0) ** i for i in range(len(samples))]),
    )

    def weights_as_reward(run, tasks, n):  # a "reward" that is the model's weights: it moves iff the model moved
        total = sum(p.double().sum().item() for model in run.models.values() for p in model.parameters())
        return {"r": [[total] for _ in tasks]}

    monkeypatch.setattr(update_direction, "first_turn_rewards", weights_as_reward)
    moved, still = update_direction.updates(saved, [0.05, 1e-12], 2, resample=1)
    (moved_row,), (still_row,) = moved["first_turn_reward"], still["first_turn_reward"]
    assert moved_row["before"] == still_row["before"]  # one "before", taken before the first rate's update
    assert abs(moved_row["change"]) > 1e-3  # after the 0.05 update, from the updated model
    assert still_row["change"] == pytest.approx(0.0, abs=1e-6)  # the saved model again: the first update undone


def test_first_turn_rewards_draw_one_stream_and_average_per_task(monkeypatch):
    from verl_mas.env import Task
    from verl_mas.rollout import EpisodeResult
    from verl_mas.sample import Sample

    seeds, configs = [], []

    class RecordingGenerator:
        def __init__(self, served, sampling, *, seed):
            seeds.append(seed)

    def sample(uid: str, role: str, reward: float, infra: str | None = None) -> Sample:
        return Sample(uid, role, 0, 0, "p", (1,), (2,), None, 0.0, reward, reward, False, infra_failure=infra)

    async def scripted_rollout(tasks, generator, router, config, env_factory):
        configs.append(config)
        rewards = {"t1": [1.0, 0.0, 5.0], "t2": [-0.5, 0.5, 0.0]}  # the 5.0 is a move the judge could not run
        return [
            EpisodeResult(
                task,
                [
                    sample(task.uid, "coder", rewards[task.uid][0]),
                    sample(task.uid, "coder", rewards[task.uid][1]),
                    sample(task.uid, "coder", rewards[task.uid][2], "sandbox" if task.uid == "t1" else None),
                    sample(task.uid, "tester", 2.0),
                ],
            )
            for task in reversed(tasks)
        ]

    monkeypatch.setattr(update_direction, "BatchingGenerator", RecordingGenerator)
    monkeypatch.setattr(update_direction, "rollout_tasks", scripted_rollout)
    run = SimpleNamespace(served={}, config=SimpleNamespace(sampling=None, alpha=0.5), router=None, env_factory=None)
    tasks = [Task("t2", "code", 0), Task("t1", "code", 1)]  # not the order the rollout returns them in
    for _ in range(2):
        assert update_direction.first_turn_rewards(run, tasks, 3) == {
            "coder": [[-0.5, 0.5, 0.0], [1.0, 0.0]],  # t2 then t1, as asked; t1's unjudged 5.0 left out
            "tester": [[2.0], [2.0]],
        }
    assert seeds == [update_direction.RESAMPLE_SEED] * 2  # every model compared draws from the same stream
    assert [(c.k, c.alpha, c.max_turns) for c in configs] == [(3, 0.5, 1)] * 2


def test_a_role_with_no_judged_candidate_on_a_task_fails_by_name(monkeypatch):
    from verl_mas.env import Task
    from verl_mas.rollout import EpisodeResult
    from verl_mas.sample import Sample

    def sample(uid: str, role: str, infra: str | None) -> Sample:
        return Sample(uid, role, 0, 0, "p", (1,), (2,), None, 0.0, 1.0, 1.0, False, infra_failure=infra)

    async def unjudged(tasks, generator, router, config, env_factory):
        # t1: the coder's only candidate was not judged; t2: the tester played nothing at all
        return [
            EpisodeResult(tasks[0], [sample("t1", "coder", "sandbox"), sample("t1", "tester", None)]),
            EpisodeResult(tasks[1], [sample("t2", "coder", None)]),
        ]

    monkeypatch.setattr(update_direction, "BatchingGenerator", lambda *args, **kwargs: None)
    monkeypatch.setattr(update_direction, "rollout_tasks", unjudged)
    run = SimpleNamespace(served={}, config=SimpleNamespace(sampling=None, alpha=1.0), router=None, env_factory=None)
    with pytest.raises(RuntimeError, match=r"\('coder', 't1'\), \('tester', 't2'\)"):
        update_direction.first_turn_rewards(run, [Task("t1", "code", 0), Task("t2", "code", 1)], 1)


def test_reward_changes_by_hand():
    before = {"a": [[0.0], [1.0, 1.0], [0.5]]}
    after = {"a": [[1.0, 1.0], [1.0], [0.0, 0.0, 0.0]]}
    (row,) = update_direction.reward_changes(before, after)
    assert row["judged_before"] == 4 and row["judged_after"] == 6
    assert row["before"] == pytest.approx(0.5) and row["after"] == pytest.approx(2 / 3)
    assert row["change"] == pytest.approx(1 / 6)  # per task: +1, 0, -0.5
    deviations = (1 - 1 / 6) ** 2 + (1 / 6) ** 2 + (0.5 + 1 / 6) ** 2
    assert row["change_se"] == pytest.approx((deviations / 2) ** 0.5 / 3**0.5)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--resample", "-1"], "--resample"),
        (["--tasks", "0"], "--tasks"),
        (["--lr", "0"], "--lr"),
        (["--lr", "3e-4", "nan"], "--lr"),
    ],
)
def test_bad_flags_are_refused_by_name_before_anything_loads(tmp_path, capsys, flags, named):
    with pytest.raises(SystemExit):
        update_direction.main([str(tmp_path / "config.json"), *flags])  # the config does not exist: nothing was read
    assert named in capsys.readouterr().err
