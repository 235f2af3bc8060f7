"""`verl-mas ablate grouping`: one warm start per seed shared by every arm, arms that differ only in `grouping`, the
paired table against runs' metrics.jsonl, re-runs that train nothing twice, and bad input refused before training."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from verl_mas.cli import main
from verl_mas.env import MultiAgentEnv, StepResult, Task, Workflow, register_env
from verl_mas.local.ablate import (
    REPORT_JSON,
    REPORT_MARKDOWN,
    WARM_START_DIR,
    ablation_report,
    plan_ablation,
    run_ablation,
)
from verl_mas.local.callbacks import RunCallbacks
from verl_mas.local.config import CONFIG_FILE
from verl_mas.local.model import load_model
from verl_mas.local.presets import SMOKE_OVERRIDES
from verl_mas.local.reporting import METRICS_FILE, read_metrics
from verl_mas.local.tokenizer import load_tokenizer

ARMS = ("task", "task_role", "task_role_turn")
# Runs of seconds: smoke-sized models and boards, one step, two tasks evaluated greedily and once sampled.
FAST = {"preset": "smoke", "steps": 1, "eval_tasks": 2, "eval_samples": 1, "progress": False, "seeds": 2}


class LettersEnv(MultiAgentEnv):
    """A test's own environment: a caller and a checker each say the task's letter, one turn. A role's local reward is
    1 for the letter, 0 for another letter, -1 for anything else; the team's is the share of roles right so far."""

    LETTERS = "abcd"

    def __init__(self, max_turns: int = 1) -> None:
        self.max_turns = max_turns
        self.letter = "a"
        self.said: dict[str, bool] = {}

    def workflow(self) -> Workflow:
        return Workflow(roles=("caller", "checker"), max_turns=self.max_turns)

    def reset(self, task: Task) -> None:
        self.letter = self.LETTERS[task.seed % len(self.LETTERS)]
        self.said = {}

    def observe(self, role: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"{role}: say {self.letter}"}]

    def step(self, role: str, text: str) -> StepResult:
        reply = text.strip()
        valid = len(reply) == 1 and reply in self.LETTERS
        self.said[role] = reply == self.letter
        local = 1.0 if self.said[role] else (0.0 if valid else -1.0)
        return StepResult(sum(self.said.values()) / 2, local, self.done, valid=valid)

    def clone(self) -> LettersEnv:
        other = LettersEnv(self.max_turns)
        other.letter, other.said = self.letter, dict(self.said)
        return other

    @property
    def done(self) -> bool:
        return len(self.said) == 2

    def success(self) -> bool:
        return self.done and all(self.said.values())

    def expert(self, role: str) -> str:
        return self.letter


register_env("ablate_letters")(LettersEnv)


class StartRecorder(RunCallbacks):
    """Records, per run folder, a digest of every model's weights and of the tokenizer as the run starts."""

    def __init__(self) -> None:
        self.starts: dict[str, tuple[str, str]] = {}

    def started(self, run, step: int) -> None:
        weights = "".join(weights_digest(model) for _, model in sorted(run.models.items()))
        self.starts[str(run.out)] = (weights, tokenizer_digest(run.tokenizer))


def weights_digest(model) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def tokenizer_digest(tokenizer) -> str:
    return json.dumps([sorted(tokenizer.get_vocab().items()), tokenizer.chat_template, tokenizer.eos_token_id])


def run_quietly(overrides: dict, recorder: RunCallbacks | None = None) -> tuple[object, list[str]]:
    lines: list[str] = []
    report = run_ablation(
        plan_ablation("grouping", overrides), log=lines.append, callbacks=[recorder] if recorder else []
    )
    return report, lines


@pytest.fixture(scope="module")
def plan_path_ablation(tmp_path_factory):
    """The grouping ablation on plan_path, 2 seeds x 3 arms of one step, and the arms' recorded starts."""
    out = tmp_path_factory.mktemp("ablate") / "plan_path"
    recorder = StartRecorder()
    report, lines = run_quietly(FAST | {"output_dir": str(out)}, recorder)
    return out, report, recorder, lines


def test_every_arm_is_a_normal_run_that_differs_only_in_grouping(plan_path_ablation):
    out, report, _, _ = plan_path_ablation
    assert (out / REPORT_JSON).is_file() and (out / REPORT_MARKDOWN).is_file()
    assert [(run.seed, run.arm) for run in report.runs] == [(seed, arm) for seed in (0, 1) for arm in ARMS]
    for seed in (0, 1):
        configs = {arm: json.loads((out / f"seed_{seed}" / arm / CONFIG_FILE).read_text()) for arm in ARMS}
        for arm, config in configs.items():
            assert (out / f"seed_{seed}" / arm / METRICS_FILE).is_file()
            assert config["grouping"] == arm and config["seed"] == seed and config["sampler_seed"] is None
            assert config["model"]["path"] == str(out / f"seed_{seed}" / WARM_START_DIR)
            assert config["steps"] == 1 and config["env"] == "plan_path"
            others = {k: v for k, v in config.items() if k not in ("grouping", "output_dir")}
            baseline = configs["task_role_turn"]
            assert others == {k: v for k, v in baseline.items() if k not in ("grouping", "output_dir")}


def test_the_arms_of_a_seed_start_from_its_one_saved_warm_start(plan_path_ablation):
    out, report, recorder, _ = plan_path_ablation
    for seed in (0, 1):
        folder = out / f"seed_{seed}" / WARM_START_DIR
        saved = (weights_digest(load_model(str(folder))), tokenizer_digest(load_tokenizer(folder)))
        starts = {recorder.starts[str(out / f"seed_{seed}" / arm)] for arm in ARMS}
        assert starts == {saved}, f"seed {seed}: the arms did not start from the saved warm start's weights"
        step_zero = [read_metrics(out / f"seed_{seed}" / arm)[0] for arm in ARMS]
        evaluated = {key: value for key, value in step_zero[0].items() if key.startswith(("eval/", "eval_sampled/"))}
        assert "eval/success" in evaluated and "eval_sampled/success" in evaluated
        for row in step_zero[1:]:
            assert {key: row[key] for key in evaluated} == evaluated
    assert recorder.starts[str(out / "seed_0" / "task")][0] != recorder.starts[str(out / "seed_1" / "task")][0]
    assert not [note for note in report.notes if "did not share" in note]


def test_the_paired_differences_are_those_of_the_runs_metrics(plan_path_ablation):
    out, _, _, _ = plan_path_ablation
    table = json.loads((out / REPORT_JSON).read_text())
    after = {
        (seed, arm): read_metrics(out / f"seed_{seed}" / arm)[-1]["eval_sampled/success"]
        for seed in (0, 1)
        for arm in ARMS
    }
    for arm in ("task", "task_role"):
        differences = [after[seed, arm] - after[seed, "task_role_turn"] for seed in (0, 1)]
        mean = (differences[0] + differences[1]) / 2
        se = abs(differences[0] - differences[1]) / 2  # n = 2: std |d0 - d1| / sqrt(2), over sqrt(2)
        summary = table["minus_baseline"][arm]["sampled_after"]
        assert summary["per_seed"] == pytest.approx(differences)
        assert summary["mean"] == pytest.approx(mean) and summary["se"] == pytest.approx(se)
        assert summary["ci95"] == pytest.approx([mean - 12.706 * se, mean + 12.706 * se])
    markdown = (out / REPORT_MARKDOWN).read_text()
    assert "group_health/zero_variance_share" in markdown and "minus `task_role_turn`" in markdown


def test_a_rerun_trains_no_finished_arm_and_restarts_a_stopped_one(plan_path_ablation):
    out, report, _, _ = plan_path_ablation
    recorder = StartRecorder()
    again, lines = run_quietly(FAST | {"output_dir": str(out)}, recorder)
    assert recorder.starts == {}
    assert sum("not trained again" in line for line in lines) == 6
    assert sum("reusing the warm start" in line for line in lines) == 2
    assert again.as_dict()["minus_baseline"] == report.as_dict()["minus_baseline"]
    # An arm stopped after its first evaluation (no checkpoint: checkpoint_every=0) trains again from the warm start,
    # and, same seed, the same numbers: its rows equal those of the run that finished.
    stopped = out / "seed_1" / "task_role"
    finished_rows = (stopped / METRICS_FILE).read_text().splitlines()
    (stopped / METRICS_FILE).write_text(finished_rows[0] + "\n")
    recorder = StartRecorder()
    run_quietly(FAST | {"output_dir": str(out)}, recorder)
    assert list(recorder.starts) == [str(stopped)]
    rows = [json.loads(line) for line in (stopped / METRICS_FILE).read_text().splitlines()]
    expected = [json.loads(line) for line in finished_rows]
    assert [untimed(row) for row in rows] == [untimed(row) for row in expected]


def untimed(row: dict) -> dict:
    return {key: value for key, value in row.items() if not key.startswith("time/")}


def test_a_custom_env_registered_by_the_test(tmp_path):
    recorder = StartRecorder()
    # the smoke preset's sizes without its env options, which are plan_path's
    sizes = {key: value for key, value in SMOKE_OVERRIDES.items() if key not in ("env_options", "output_dir")}
    overrides = FAST | sizes | {"preset": [], "env": "ablate_letters", "output_dir": str(tmp_path), "eval_tasks": 4}
    report, _ = run_quietly(overrides, recorder)
    assert report.env == "ablate_letters" and len(report.runs) == 6
    assert {run.arm for run in report.runs} == set(ARMS)
    for seed in (0, 1):
        assert len({recorder.starts[str(tmp_path / f"seed_{seed}" / arm)] for arm in ARMS}) == 1
    health = {summary.arm: summary.group_health for summary in report.arms}
    assert health["task_role_turn"]["group_health/mixed_prompt_share"] == 0.0
    assert "group_health/caller/turn0/advantage_mean" in health["task"]
    # every arm also logs what the groupings coarser than its own would leave on the same batch
    assert {"group_health/task_role/prompt_offset_share", "group_health/task/prompt_offset_share"} <= set(
        health["task_role_turn"]
    )
    assert "group_health/task/prompt_offset_share" in health["task_role"]
    assert not any(key.startswith(("group_health/task/", "group_health/task_role/")) for key in health["task"])


def write_run(folder: Path, rows: list[dict]) -> None:
    folder.mkdir(parents=True)
    (folder / METRICS_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_the_table_by_hand_from_written_metrics(tmp_path):
    plan = plan_ablation("grouping", {"seeds": [0, 1, 2], "steps": 2, "output_dir": str(tmp_path)})
    greedy_after = {"task_role_turn": (0.8, 0.7, 0.8), "task": (0.6, 0.6, 0.5), "task_role": (0.7, 0.5, 0.8)}
    groups = {"task": (2, 4), "task_role": (4, 6), "task_role_turn": (8, 10)}
    for seed in plan.seeds:
        for arm in ARMS:
            rows = [
                {"step": 0, "eval/success": 0.5, "eval_sampled/success": 0.25},
                {"step": 1, "group_health/groups": groups[arm][0] + seed, "group_health/singleton_share": 0.5},
                {"step": 2, "group_health/groups": groups[arm][1] + seed, "eval/success": greedy_after[arm][seed]}
                | {"eval_sampled/success": 0.25 + seed / 10},
            ]
            write_run(Path(plan.arm_config(seed, arm).output_dir), rows)
    report = ablation_report(plan)
    # task minus task_role_turn: -0.2, -0.1, -0.3; mean -0.2; deviations 0, +0.1, -0.1, variance 0.02 / 2 = 0.01,
    # SE 0.1 / sqrt(3) = 0.0577350, half width 4.303 * SE = 0.2484339
    task = report.greedy_vs_baseline["task"]
    assert task.per_seed == pytest.approx((-0.2, -0.1, -0.3))
    assert task.mean == pytest.approx(-0.2) and task.se == pytest.approx(0.0577350)
    assert task.ci95 == pytest.approx((-0.2 - 0.2484339, -0.2 + 0.2484339), abs=1e-6)
    # sampled success after is the same in every arm of a seed: differences all 0
    assert report.sampled_vs_baseline["task_role"].ci95 == (0.0, 0.0)
    summaries = {summary.arm: summary for summary in report.arms}
    # task_role_turn gains 0.3, 0.2, 0.3: mean 0.2667, SE 0.0577350 / sqrt(3) = 0.0333333, interval above 0
    assert summaries["task_role_turn"].greedy_after == pytest.approx(2.3 / 3)
    assert summaries["task_role_turn"].greedy_gain.mean == pytest.approx(0.8 / 3)
    assert summaries["task_role_turn"].greedy_gain.ci95[0] == pytest.approx(0.8 / 3 - 4.303 * 0.1 / 3)
    assert summaries["task"].sampled_gain.per_seed == pytest.approx((0.0, 0.1, 0.2))
    # mean over the steps, then over the seeds: task's groups (2+4)/2 + seed, so 3, 4, 5: 4
    assert summaries["task"].group_health == pytest.approx(
        {"group_health/groups": 4.0, "group_health/singleton_share": 0.5}
    )
    assert "learned beyond noise" in report.notes[0]


def test_runs_without_group_health_metrics_say_so(tmp_path):
    plan = plan_ablation("grouping", {"seeds": 2, "steps": 1, "output_dir": str(tmp_path), "eval_samples": 0})
    for seed in plan.seeds:
        for arm in ARMS:
            rows = [{"step": 0, "eval/success": 0.5}, {"step": 1, "eval/success": 0.5}]
            write_run(Path(plan.arm_config(seed, arm).output_dir), rows)
    report = ablation_report(plan)
    markdown = report.markdown()
    assert "no group-health metrics logged" in markdown
    assert report.sampled_vs_baseline["task"].mean is None
    assert "did not learn beyond noise" in report.notes[0]


def test_an_unfinished_run_is_not_tabled(tmp_path):
    plan = plan_ablation("grouping", {"seeds": 2, "steps": 3, "output_dir": str(tmp_path)})
    for seed in plan.seeds:
        for arm in ARMS:
            write_run(Path(plan.arm_config(seed, arm).output_dir), [{"step": 0, "eval/success": 0.5}])
    with pytest.raises(Exception, match="has not finished"):
        ablation_report(plan)


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("groupings", {}, "unknown ablation 'groupings'; known ablations: grouping"),
        ("grouping", {"seeds": 1}, "seeds must be at least 2"),
        ("grouping", {"seeds": [3, 3]}, "seeds must list at least two distinct seeds"),
        ("grouping", {"seeds": True}, "seeds must be a count"),
        ("grouping", {"seeds": [0, -1]}, "seeds must be an integer in"),
        ("grouping", {"grouping": "task"}, "grouping: the ablation sets it for each arm itself"),
        ("grouping", {"seed": 3}, "seed: the ablation sets it for each seed itself"),
        ("grouping", {"sampler_seed": 3}, "sampler_seed: the ablation sets it"),
        ("grouping", {"resume": True}, "resume: the ablation sets it"),
        ("grouping", {"preset": ["smoke", "grouping_task"]}, "preset=grouping_task sets grouping"),
        ("grouping", {"preset": "no_such_preset"}, "unknown preset 'no_such_preset'"),
        ("grouping", {"learning_rate": 1e-3}, "unknown config key 'learning_rate'"),
        ("grouping", {"env": "no_such_env"}, "no_such_env"),
        ("grouping", {"steps": -1}, "steps must be an integer >= 0"),
    ],
)
def test_bad_input_fails_at_start_naming_the_key(tmp_path, name, overrides, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        plan_ablation(name, {"output_dir": str(tmp_path / "out")} | overrides)
    assert not (tmp_path / "out").exists()


def test_a_folder_holding_runs_of_other_settings_is_refused(plan_path_ablation):
    out, _, _, _ = plan_path_ablation
    with pytest.raises(ValueError, match=r"seed_0/task holds a run of other settings \(update\.lr\)"):
        plan_ablation("grouping", FAST | {"output_dir": str(out), "update": {"lr": 1e-2}})
    with pytest.raises(ValueError, match=r"seed_0/warm_start holds a warm start of other settings \(warm_start\)"):
        plan_ablation("grouping", FAST | {"output_dir": str(out), "warm_start": {"epochs": 2}})
    plan_ablation("grouping", FAST | {"output_dir": str(out), "steps": 3})  # a longer budget continues the same runs


def test_a_given_model_path_is_every_arms_start_and_nothing_is_saved(tmp_path):
    plan = plan_ablation("grouping", {"seeds": 2, "model": {"path": "some/model"}, "output_dir": str(tmp_path)})
    assert {plan.arm_config(seed, arm).model.path for seed in plan.seeds for arm in ARMS} == {"some/model"}
    plan.prepare_warm_start(0, log=print)
    assert not (tmp_path / "seed_0").exists()


def test_the_warm_start_is_one_shared_model_whatever_the_arms_router(tmp_path):
    plan = plan_ablation(
        "grouping", {"seeds": 2, "router": "per_role", "lora": {"rank": 4}, "output_dir": str(tmp_path)}
    )
    warm = plan.warm_start_config(1)
    assert warm.router == "shared" and warm.lora.rank == 0 and warm.seed == 1
    arm = plan.arm_config(1, "task")
    assert arm.router == "per_role" and dataclasses.asdict(arm)["model"]["path"].endswith("seed_1/warm_start")


def test_the_command_prints_the_table_of_a_finished_ablation_without_training(plan_path_ablation, capsys):
    out, _, _, _ = plan_path_ablation
    arguments = ["preset=smoke", "steps=1", "eval_tasks=2", "eval_samples=1", "progress=false", "seeds=2"]
    assert main(["ablate", "grouping", *arguments, f"output_dir={out}"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("not trained again") == 6
    assert (out / REPORT_MARKDOWN).read_text() in printed
    assert f"written: {out / REPORT_JSON}, {out / REPORT_MARKDOWN}" in printed


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["grouping", "grouping=task"], "grouping: the ablation sets it for each arm itself"),
        (["grouping", "seeds=1"], "seeds must be at least 2"),
        (["shuffling"], "unknown ablation 'shuffling'"),
    ],
)
def test_the_command_refuses_bad_input_naming_it(tmp_path, capsys, arguments, message):
    assert main(["ablate", *arguments, f"output_dir={tmp_path / 'out'}"]) == 2
    assert f"verl-mas ablate: error: {message}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_command_documents_itself(capsys):
    with pytest.raises(SystemExit):
        main(["ablate", "--help"])
    shown = capsys.readouterr().out
    for text in ("verl-mas ablate grouping env=my_game seeds=8 steps=200", "task|task_role|task_role_turn", "seeds"):
        assert text in shown
    assert "the training keys of every arm" in shown and "update.*" in shown
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "verl-mas ablate grouping" in capsys.readouterr().out


def test_the_arms_start_from_loaded_weights_as_they_are_unless_a_tune_is_asked_for(tmp_path):
    loaded = plan_ablation("grouping", {"model": {"path": "/some/model"}, "output_dir": str(tmp_path), "seeds": 2})
    assert not loaded.saves_warm_start and loaded.warm_start_path(1) == "/some/model"
    # epochs alone never tune loaded weights (a config saved before tune_loaded existed reads as it did)
    epochs = plan_ablation(
        "grouping", {"model": {"path": "/m"}, "warm_start": {"epochs": 4}, "output_dir": str(tmp_path)}
    )
    assert not epochs.saves_warm_start
    tuned = plan_ablation(
        "grouping", {"model": {"path": "/m"}, "warm_start": {"tune_loaded": True}, "output_dir": str(tmp_path)}
    )
    assert tuned.saves_warm_start and tuned.warm_start_path(0) == str(tmp_path / "seed_0" / "warm_start")
    arm = tuned.arm_config(0, "task")
    assert arm.model.path == str(tmp_path / "seed_0" / "warm_start") and not arm.warm_start.tune_loaded  # no re-tune
    assert plan_ablation("grouping", {"output_dir": str(tmp_path)}).saves_warm_start  # the tiny model: always
