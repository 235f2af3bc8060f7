"""The local run's callbacks: their events fire in order with the run's own payloads, their metrics land in
metrics.jsonl, a key they would overwrite is refused, and a run with observers only writes what a run without does."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from mas_testkit import say_digit_config
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.train import sample_advantages, train
from verl_mas.sample import trainable


def config(output_dir: Path, **overrides) -> LocalTrainConfig:
    """mas_testkit's tiny say_digit run (every move's info holds its reply's length), sampled evaluation on."""
    return say_digit_config(output_dir, {"eval_samples": 1}, **overrides)


class Recorder(RunCallbacks):
    """Every event with its payload, and the mean reply length of each recorded rollout as `<prefix>/chars`."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def started(self, run, step):
        self.events.append(("started", step))

    def rollout(self, run, prefix, results):
        self.events.append(("rollout", prefix, results))
        chars = [info["chars"] for result in results for info in result.move_infos]
        return {f"{prefix}/chars": statistics.fmean(chars)}

    def advantages(self, run, step, samples, advantages):
        self.events.append(("advantages", step, samples, advantages.clone()))

    def step_end(self, run, step, metrics):
        self.events.append(("step_end", step, dict(metrics)))
        return {"probe/step_seen": float(step)}


def rows(folder: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def without_timings(row: dict[str, float]) -> dict[str, float]:
    return {key: value for key, value in row.items() if not key.startswith("time/")}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Recorder, LocalTrainConfig]:
    recorder = Recorder()
    run_config = config(tmp_path_factory.mktemp("recorded"))
    train(run_config, log=lambda line: None, callbacks=[recorder])
    return recorder, run_config


def test_events_fire_in_order(recorded):
    recorder, _ = recorded
    names = [(event[0], event[1]) for event in recorder.events]
    assert names == [
        ("started", 0),
        ("rollout", "eval"),
        ("rollout", "eval_sampled"),
        ("rollout", "rollout"),
        ("advantages", 0),
        ("step_end", 0),
        ("rollout", "rollout"),
        ("advantages", 1),
        ("rollout", "eval"),  # the last step evaluates, before its row is complete
        ("rollout", "eval_sampled"),
        ("step_end", 1),
    ]


def test_payloads_are_the_runs_own(recorded):
    recorder, run_config = recorded
    for index, event in enumerate(recorder.events):
        if event[0] == "rollout":
            for result in event[2]:
                # one info per sample, from the move that sample made
                assert [info["chars"] for info in result.move_infos] == [len(s.text) for s in result.samples]
                assert result.samples
        if event[0] == "advantages":
            _, step, samples, advantages = event
            rolled_out = recorder.events[index - 1]
            assert rolled_out[:2] == ("rollout", "rollout")
            assert samples == trainable([s for r in rolled_out[2] for s in r.samples])
            expected = sample_advantages(samples, run_config.grouping, run_config.norm_adv_by_std)
            assert advantages.tolist() == expected.tolist()
        if event[0] == "step_end":
            _, step, metrics = event
            assert metrics["step"] == step + 1 and "rollout/success" in metrics and "time/step_s" in metrics
            assert ("eval/success" in metrics) == (step == 1)


def test_callback_metrics_land_in_metrics_jsonl(recorded):
    recorder, run_config = recorded
    written = rows(Path(run_config.output_dir))
    rollouts = [event for event in recorder.events if event[0] == "rollout"]

    def mean_chars(results) -> float:
        return statistics.fmean(len(s.text) for r in results for s in r.samples)

    assert written[0]["eval/chars"] == mean_chars(rollouts[0][2])
    assert written[0]["eval_sampled/chars"] == mean_chars(rollouts[1][2])
    assert written[1]["rollout/chars"] == mean_chars(rollouts[2][2])
    assert written[2]["rollout/chars"] == mean_chars(rollouts[3][2])
    assert written[2]["eval/chars"] == mean_chars(rollouts[4][2])
    assert [row.get("probe/step_seen") for row in written] == [None, 0.0, 1.0]


class Observer(RunCallbacks):
    """Reads every payload and adds nothing."""

    def rollout(self, run, prefix, results):
        sum(len(info) for result in results for info in result.move_infos)
        return {}

    def advantages(self, run, step, samples, advantages):
        advantages.sum()


def test_observers_change_no_number(tmp_path, recorded):
    _, recorded_config = recorded
    train(config(tmp_path / "plain"), log=lambda line: None)
    train(config(tmp_path / "observed"), log=lambda line: None, callbacks=[Observer(), RunCallbacks()])
    plain, observed = rows(tmp_path / "plain"), rows(tmp_path / "observed")
    assert [without_timings(row) for row in observed] == [without_timings(row) for row in plain]
    # the recorded run differs from these by its callbacks' added keys only
    added = ("eval/chars", "eval_sampled/chars", "rollout/chars", "probe/step_seen")
    with_callbacks = [
        {k: v for k, v in without_timings(row).items() if k not in added}
        for row in rows(Path(recorded_config.output_dir))
    ]
    assert with_callbacks == [without_timings(row) for row in plain]


class Overwriter(RunCallbacks):
    def step_end(self, run, step, metrics):
        return {"rollout/success": 1.0}


def test_a_callback_may_not_overwrite_a_metric(tmp_path):
    with pytest.raises(ValueError, match=r"Overwriter returned metrics the run already has: rollout/success"):
        train(config(tmp_path, steps=1), log=lambda line: None, callbacks=[Overwriter()])
