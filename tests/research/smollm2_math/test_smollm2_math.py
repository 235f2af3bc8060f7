"""research.smollm2_math: the design's configs, the chance yardsticks by hand, and the regime's rule on hand-made
records (the real model's runs are the study itself)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from research.smollm2_math import figures, study
from verl_mas.dataset import split_tasks
from verl_mas.env import make_env
from verl_mas.local.config import trains_warm_start
from verl_mas.local.presets import resolve_train_config
from verl_mas.overrides import parse_overrides


def config_of(overrides: list[str]):
    return resolve_train_config(parse_overrides(overrides))


def test_the_runs_are_the_designs():
    team = config_of([*study.TASK, "seed=0", "steps=0"])
    assert (team.env, team.model.path, trains_warm_start(team)) == ("math", "smollm2-135m-instruct", False)
    assert team.env_options["source_options"] == {
        "min_terms": 2, "max_terms": 2, "max_digits": 1, "operators": ["+", "-"], "allow_parentheses": False,
        "allow_negation": False,
    }  # fmt: skip
    assert team.env_options["worked_example"] and team.env_options["max_turns"] == 2
    assert (team.k, team.tasks_per_step, team.update.lr, team.sampling.max_new_tokens) == (4, 4, 1e-5, 32)
    assert (team.eval_tasks, team.eval_samples) == (64, 1)
    twin = config_of(study.learning_overrides(2, "at_grpo_again"))
    assert (twin.seed, twin.sampler_seed, twin.steps, twin.checkpoint_every) == (2, 1002, 40, 10)
    assert config_of(study.learning_overrides(2, "at_grpo")).sampler_seed is None
    single = config_of([*study.TASK, *study.REGIME_ARMS["single"]])
    assert single.env_options["single_agent"] and not team.env_options.get("single_agent", False)


def test_the_answer_yardsticks_count_the_evaluation_problems_by_hand():
    config = config_of([*study.TASK, "seed=0", "steps=0"])
    found = study.answer_baselines(config)
    env = make_env(config.env, **config.env_options)
    answers = []
    for task in split_tasks(config.env, "eval", config.eval_tasks, 0, config.env_options):
        env.reset(task)
        answers.append(env.problem.answer)
    example = env.observe("reasoner")[2]["content"]  # the worked example's reply: \boxed{ANSWER}
    copied = example.removeprefix("\\boxed{").removesuffix("}")
    assert found["copied_answer"] == answers.count(copied) / len(answers)
    assert found["best_constant_answer"] == max(answers.count(a) for a in answers) / len(answers)
    assert found["copied_answer"] <= found["best_constant_answer"] < 1.0


def regime_record(arm: str, greedy: float) -> dict:
    return {"arm": arm, "eval_tasks": 64, "greedy": greedy, "sampled": 0.1, "sampled_t0.5": 0.2, "invalid_greedy": 0.0,
            "invalid_sampled": 0.5, "copied_answer": 0.09, "best_constant_answer": 0.14}  # fmt: skip


@pytest.mark.parametrize(("greedy", "met"), [(0.25, True), (0.6, True), (0.14, False), (0.65, False), (0.05, False)])
def test_the_regime_rule_asks_for_the_band_and_more_than_both_yardsticks(tmp_path, monkeypatch, greedy, met):
    monkeypatch.setattr(figures, "DATA", tmp_path)
    assert figures.regime_text() == "Not run yet."
    records = [regime_record("single", 0.3), regime_record("team", greedy)]
    (tmp_path / study.REGIME_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    text = figures.regime_text()
    assert text.splitlines()[2].startswith("| `team` |")  # the design's order, whatever the file's
    assert ("The rule is met" in text) == met and ("learning runs do not go ahead" in text) == (not met)


def test_the_second_designs_local_arms_change_only_what_they_name():
    team = config_of(study.learning_overrides(1, "at_grpo"))
    single = config_of(study.learning_overrides(1, "single_grpo"))
    assert single.env_options["single_agent"] and (single.rollout_mode, single.grouping) == ("independent", "task")
    assert (team.rollout_mode, team.grouping, team.router) == ("tree", "task_role_turn", "shared")
    per_role = config_of(study.learning_overrides(0, "at_grpo_per_role"))
    assert per_role.router == "per_role" and per_role.grouping == team.grouping
    single_back = {"env_options": team.env_options, "rollout_mode": "tree", "grouping": "task_role_turn"}
    assert single != team and dataclasses.replace(single, **single_back) == team
    assert per_role != team and dataclasses.replace(per_role, router="shared", seed=1) == team


def run_record(seed: int, arm: str, greedy_after: float, **extra) -> dict:
    return {"seed": seed, "arm": arm, "start_arm": study.START, "eval_tasks": 64, "greedy": [0.2, greedy_after],
            "sampled": [0.1, greedy_after - 0.1], "sampled_t0.5": [0.1, greedy_after], "reward_curve": [0.4] * 40,
            "zero_variance_curve": [0.5] * 40, "step_s_median": 30.0, **extra}  # fmt: skip


def write_runs(folder, records: list[dict]) -> None:
    (folder / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_team_minus_the_single_agent_is_paired_per_seed_by_hand(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "DATA", tmp_path)
    write_runs(tmp_path, [run_record(0, "at_grpo", 1.0), run_record(0, "single_grpo", 0.5),
                          run_record(1, "at_grpo", 0.9), run_record(1, "single_grpo", 0.6)])  # fmt: skip
    text = figures.tables()["single"]
    # greedy gaps 0.5 and 0.3: mean 0.4, SE 0.1, t(1) = 12.706 -> [-0.871, +1.671]
    assert "| greedy | +0.400 (0.100) [-0.871, +1.671] | 2 | 0, 1 |" in text
    assert "interim" in text and "| `single_grpo` | greedy | +0.350 (0.050)" in text
    assert figures.tables()["single_headline"] == (
        "Team minus single agent after 40 steps, greedy: +0.400 (0.100) [-0.871, +1.671]; the single agent's own "
        "change: +0.350 (0.050) [-0.285, +0.985]; n = 2 seeds (interim)"
    )


def test_a_verl_run_meets_its_bar_only_gaining_and_within_the_twins_floor(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "DATA", tmp_path)
    before, after = [0] * 60 + [1] * 4, [0] * 8 + [1] * 56  # 0.0625 -> 0.875 paired per problem
    verl = {"greedy_per_problem": [before, after]}
    floor_runs = [run_record(0, "at_grpo", 0.9), run_record(0, "at_grpo_again", 0.8)]  # floor 0.1
    write_runs(tmp_path, [*floor_runs, run_record(0, "verl_shared", 0.875, **verl)])
    (shared, per_role) = figures.tables()["verl"].splitlines()[2:4]
    assert shared.startswith("| `verl_shared` |") and shared.endswith("| 0.900 | -0.025 | met |")
    assert "not run yet" in per_role
    headline = figures.tables()["verl_headline"]  # 52 of 64 problems go 0 -> 1, none back: +0.8125
    assert "change +0.812 (" in headline
    assert headline.endswith(
        "minus its local twin -0.025 (floor 0.100), bar met; `verl_per_role`: not run yet; seed 0, n = 64 problems"
    )
    write_runs(tmp_path, [*floor_runs, run_record(0, "verl_shared", 0.7, **verl)])  # 0.2 below its twin
    assert figures.tables()["verl"].splitlines()[2].endswith("| -0.200 | not met |")
    flat = {"greedy_per_problem": [before, before]}
    write_runs(tmp_path, [run_record(0, "verl_shared", 0.0625, **flat), run_record(0, "verl_per_role", 0.9, **verl)])
    shared, per_role = figures.tables()["verl"].splitlines()[2:4]
    assert shared.endswith("| not met |") and per_role.endswith("| - | - | open |")  # no twin, no floor yet


def test_an_arm_outside_the_design_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "DATA", tmp_path)
    write_runs(tmp_path, [run_record(0, "mystery", 0.5)])
    with pytest.raises(ValueError, match="arm 'mystery'"):
        figures.tables()


def test_the_smollm2_math_preset_is_the_first_20_steps_of_the_designs_at_grpo_run():
    """The preset's readings at step 20 are the study's `at_grpo` runs' at their step 20 (the RL lr is constant and
    both evaluate at 0 and 20), which is what docs/presets.md quotes."""
    preset = config_of(["preset=smollm2_math", "seed=1"])
    study_run = config_of([*study.learning_overrides(1, "at_grpo"), "steps=20"])
    same = {"output_dir": "x", "progress": True, "checkpoint_every": 0}
    assert dataclasses.replace(preset, **same) == dataclasses.replace(study_run, **same)
    assert (preset.steps, preset.eval_every) == (20, 20) and study_run.eval_every == 20
