"""research.learning and its harness: --collect reports the table from saved runs, finished or stopped early,
training nothing; paired differences; the methods' configs."""

import dataclasses
import json
from pathlib import Path

import pytest

from research import harness, methods
from research.learning import learning
from verl_mas.local.arms import arm_run_config
from verl_mas.local.config import CONFIG_FILE, config_json


def save_run(out: Path, seed: int, method: str, rows: list[dict], config_changes: dict | None = None) -> None:
    config = dataclasses.replace(methods.env_config("plan_path", ["default"], {}, 4), seed=seed)
    folder = out / "plan_path" / f"seed{seed}"
    arm = methods.METHODS[method].arm
    config = arm_run_config(config, arm, str(folder / arm.start), folder / method)
    saved = dataclasses.replace(config, **(config_changes or {}))
    run = Path(config.output_dir)
    run.mkdir(parents=True)
    (run / CONFIG_FILE).write_text(config_json(saved))
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_collect_reports_finished_and_stopped_runs_and_refuses_other_configs(tmp_path):
    out = tmp_path / "table"
    save_run(out, 0, "mas_no_rl", [{"step": 0, "eval/success": 0.5, "eval_sampled/success": 0.25}])
    stopped = [
        {"step": 0, "eval/success": 0.5, "eval_sampled/success": 0.25},
        {"step": 1, "time/step_s": 2.0},
        {"step": 2, "time/step_s": 2.0, "eval/success": 0.75, "eval_sampled/success": 0.5, "time/eval_s": 1.0},
        {"step": 3, "time/step_s": 2.0},
    ]
    save_run(out, 0, "at_grpo_shared", stopped)
    finished = [{"step": 0, "eval/success": 0.25}, *({"step": s, "time/step_s": 1.0} for s in (1, 2, 3))]
    save_run(out, 1, "at_grpo_shared", [*finished, {"step": 4, "eval/success": 0.5}])
    save_run(out, 1, "mas_no_rl", [{"step": 0, "eval/success": 0.9}], {"k": 8})  # another setting
    args = ["--envs", "plan_path", "--seeds", "0", "1", "--methods", "mas_no_rl", "at_grpo_shared"]
    learning.main([*args, "--steps", "4", "--out", str(out), "--collect"])

    report = json.loads((out / harness.RESULTS_FILE).read_text())
    runs = {(r["method"], r["seed"]): r for r in report["runs"]}
    assert runs["at_grpo_shared", 0]["stopped_at"] == 3 and runs["at_grpo_shared", 0]["evals"] == [[0, 0.5], [2, 0.75]]
    assert runs["at_grpo_shared", 0]["wall_s"] == pytest.approx(7.0)
    assert runs["at_grpo_shared", 1]["stopped_at"] is None and runs["at_grpo_shared", 1]["evals"][-1] == [4, 0.5]
    assert runs["mas_no_rl", 0]["stopped_at"] is None and runs["mas_no_rl", 0]["sampled_evals"] == [[0, 0.25]]
    assert runs["mas_no_rl", 1]["error"].startswith("no saved run of this config")
    summary = {row["method"]: row for row in report["summary"]}
    assert summary["at_grpo_shared"]["after_per_seed"] == [0.75, 0.5]
    assert summary["at_grpo_shared"]["gain_per_seed"] == [0.25, 0.25]
    assert summary["at_grpo_shared"]["stopped"] == ["seed 0 at step 3 (last eval: step 2)"]
    assert summary["mas_no_rl"]["seeds"] == [0] and len(summary["mas_no_rl"]["errors"]) == 1
    assert "seed 0 at step 3 (last eval: step 2)" in out.with_suffix(".md").read_text()
    # nothing was trained: no warm start folder, and the runs' files are as they were saved
    assert not list(out.rglob("warm_start_*"))
    assert len((out / "plan_path" / "seed0" / "at_grpo_shared" / "metrics.jsonl").read_text().splitlines()) == 4


def test_collect_needs_an_evaluation(tmp_path):
    out = tmp_path / "table"
    save_run(out, 0, "single_grpo", [{"step": 1, "time/step_s": 1.0}])
    learning.main(["--envs", "plan_path", "--methods", "single_grpo", "--steps", "4", "--out", str(out), "--collect"])
    (run,) = json.loads((out / harness.RESULTS_FILE).read_text())["runs"]
    assert run["error"].startswith("no evaluation saved")


def test_collect_reports_paired_differences_from_a_baseline(tmp_path):
    out = tmp_path / "table"
    # greedy afters per seed: baseline 0.5, 0.6, 0.7; task grouping 0.4, 0.6, 0.5 (differences -0.1, 0, -0.2);
    # the grouping arm has no run on seed 3, so seed 3 pairs with nothing
    afters = {"at_grpo_shared": [0.5, 0.6, 0.7, 0.9], "mas_grpo_task": [0.4, 0.6, 0.5]}
    for method, values in afters.items():
        for seed, after in enumerate(values):
            rows = [
                {"step": 0, "eval/success": 0.5, "eval_sampled/success": 0.25},
                {"step": 4, "eval/success": after, "eval_sampled/success": after / 2},
            ]
            save_run(out, seed, method, rows)
    args = ["--envs", "plan_path", "--seeds", "0", "1", "2", "3", "--methods", "at_grpo_shared", "mas_grpo_task"]
    learning.main([*args, "--steps", "4", "--out", str(out), "--collect", "--baseline", "at_grpo_shared"])

    (row,) = json.loads((out / harness.RESULTS_FILE).read_text())["paired"]
    assert row["method"] == "mas_grpo_task" and row["baseline"] == "at_grpo_shared" and row["seeds"] == [0, 1, 2]
    greedy, sampled = row["greedy"], row["sampled"]
    assert greedy["per_seed"] == pytest.approx([-0.1, 0.0, -0.2])
    assert greedy["mean"] == pytest.approx(-0.1) and greedy["se"] == pytest.approx(0.1 / 3**0.5)
    half = 4.303 * 0.1 / 3**0.5  # Student's t, 2 degrees of freedom
    assert greedy["ci95"] == pytest.approx([-0.1 - half, -0.1 + half])
    assert sampled["mean"] == pytest.approx(-0.05) and sampled["n"] == 3
    text = out.with_suffix(".md").read_text()
    assert "### Paired differences from `at_grpo_shared`" in text
    assert "| plan_path | mas_grpo_task - at_grpo_shared | 3 | -0.100 (0.058) | [-0.348, +0.148] |" in text


def test_the_kl_method_turns_the_kl_loss_on_with_the_commands_coefficient_and_no_other_method_does(tmp_path):
    config = methods.env_config("sokoban", ["default"], {"update": {"kl_coef": 0.3}}, 4)
    runs = {m: arm_run_config(config, methods.METHODS[m].arm, "warm", tmp_path / m) for m in methods.METHODS}
    assert (runs["at_grpo_shared_kl"].update.use_kl_loss, runs["at_grpo_shared_kl"].update.kl_coef) == (True, 0.3)
    assert [m for m, run in runs.items() if run.update.use_kl_loss] == ["at_grpo_shared_kl"]
    kl, plain = (dataclasses.asdict(runs[m]) for m in ("at_grpo_shared_kl", "at_grpo_shared"))
    for config_of_run in (kl, plain):
        config_of_run["update"].pop("use_kl_loss")
        config_of_run.pop("output_dir")
    assert kl == plain  # the same run otherwise
