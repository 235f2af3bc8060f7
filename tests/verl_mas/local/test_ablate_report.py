"""`verl-mas ablate`'s table from hand-made run folders: each arm's invalid-move and zero-variance shares beside its
success, the warning when the warm start's expert moves do not fit the reply budget, and the note when nothing won."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_mas.local.ablate import REPORT_JSON, REPORT_MARKDOWN, plan_ablation, run_ablation
from verl_mas.local.ablate_report import ablation_report
from verl_mas.local.arms import EXPERT_MOVES_FILE, WARM_START_KEY_FILE, warm_start_key
from verl_mas.local.files import RunError
from verl_mas.local.reporting import METRICS_FILE

ARMS = ("task", "task_role", "task_role_turn")


def write_runs(plan, success: float = 0.5) -> None:
    """Every arm of every seed finished at step 2. Invalid greedy moves: 0.75 at step 0 in every arm, then per arm
    `task` 0.5 + seed / 10, `task_role` 0.25, `task_role_turn` 0.0; zero-variance groups 0.2 and 0.4 at the two
    training steps in `task`, 0.6 and 0.8 in the others (seed 1 of `task` adds 0.1 to both)."""
    after = {"task": 0.5, "task_role": 0.25, "task_role_turn": 0.0}
    for seed in plan.seeds:
        for arm in ARMS:
            zero = (0.2, 0.4) if arm == "task" else (0.6, 0.8)
            shift = 0.1 * seed if arm == "task" else 0.0
            rows = [
                {"step": 0, "eval/success": success, "eval/invalid_move_share": 0.75},
                {"step": 1, "group_health/zero_variance_share": zero[0] + shift},
                {"step": 2, "group_health/zero_variance_share": zero[1] + shift, "eval/success": success}
                | {"eval/invalid_move_share": after[arm] + (seed / 10 if arm == "task" else 0.0)},
            ]
            folder = Path(plan.arm_config(seed, arm).output_dir)
            folder.mkdir(parents=True)
            (folder / METRICS_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))


def save_warm_start_files(plan, seed: int, lengths: dict | None) -> None:
    """The files of a saved warm start that the table reads: its key (so it is reused) and its expert moves."""
    folder = Path(plan.warm_start_path(seed))
    folder.mkdir(parents=True)
    (folder / WARM_START_KEY_FILE).write_text(warm_start_key(plan.warm_start_config(seed)))
    if lengths is not None:
        (folder / EXPERT_MOVES_FILE).write_text(json.dumps(lengths))


def test_each_arm_shows_its_invalid_moves_and_zero_variance_groups_beside_its_success(tmp_path):
    plan = plan_ablation("grouping", {"seeds": [0, 1], "steps": 2, "eval_samples": 0, "output_dir": str(tmp_path)})
    write_runs(plan)
    report = ablation_report(plan)
    summaries = {summary.arm: summary for summary in report.arms}
    # task: invalid after 0.5 and 0.6, mean 0.55; zero variance (0.2 + 0.4) / 2 = 0.3 and 0.4, mean 0.35
    assert summaries["task"].invalid_before == 0.75 and summaries["task"].invalid_after == pytest.approx(0.55)
    assert summaries["task"].zero_variance == pytest.approx(0.35)
    assert summaries["task_role_turn"].invalid_after == 0.0
    assert summaries["task_role"].zero_variance == pytest.approx(0.7)
    rows = report.markdown().splitlines()
    assert "| invalid moves before | invalid moves after | zero-variance groups |" in rows[4]
    no_gain = "| 0.500 | 0.500 | +0.000 (0.000) [+0.000, +0.000] | - | - | - |"
    assert f"| `task` {no_gain} 0.750 | 0.550 | 0.350 |" in rows
    assert f"| `task_role` {no_gain} 0.750 | 0.250 | 0.700 |" in rows
    markdown = "\n".join(rows)
    assert report.as_dict()["arms"][0]["zero_variance"] == pytest.approx(0.35)
    assert report.warnings == () and "**Warning:**" not in markdown  # no expert moves saved: nothing to warn of


def test_runs_logged_before_the_shares_existed_show_a_dash(tmp_path):
    plan = plan_ablation("grouping", {"seeds": 2, "steps": 1, "eval_samples": 0, "output_dir": str(tmp_path)})
    for seed in plan.seeds:
        for arm in ARMS:
            folder = Path(plan.arm_config(seed, arm).output_dir)
            folder.mkdir(parents=True)
            rows = [{"step": 0, "eval/success": 0.5}, {"step": 1, "eval/success": 0.25}]
            (folder / METRICS_FILE).write_text("".join(json.dumps(row) + "\n" for row in rows))
    (task, *_) = ablation_report(plan).arms
    assert (task.invalid_before, task.invalid_after, task.zero_variance) == (None, None, None)
    assert "| `task` | 0.500 | 0.250 | -0.250 (0.000) [-0.250, -0.250] | - | - | - | - | - | - |" in (
        ablation_report(plan).markdown()
    )


def test_expert_moves_longer_than_the_reply_budget_are_warned_of_naming_the_setting(tmp_path):
    # the smoke preset caps replies at 8 tokens: seed 0's warm start has 3 of 5 moves longer (9, 9, 12), seed 1's
    # 1 of 4 (10), so 4 of 9 over both, the longest 12; a limit that fits them all would be 12
    plan = plan_ablation("grouping", {"preset": "smoke", "seeds": [0, 1], "steps": 2, "output_dir": str(tmp_path)})
    save_warm_start_files(plan, 0, {"plan": {"5": 2, "9": 2}, "tool": {"12": 1}})
    save_warm_start_files(plan, 1, {"plan": {"8": 3}, "tool": {"10": 1}})
    write_runs(plan, success=0.0)
    lines: list[str] = []
    report = run_ablation(plan, log=lines.append)  # every warm start and arm is saved: nothing trains
    (warning,) = report.warnings
    assert warning.startswith("the warm start's expert moves do not fit the reply budget (seeds 0, 1): 4 of 9 expert")
    assert "longer than sampling.max_new_tokens=8 (longest: 12 tokens with eos)" in warning
    assert "Set sampling.max_new_tokens=12 to leave room." in warning
    assert 'docs/local_engine.md, "Budget for an ablation"' in warning
    # printed per seed before its arms train, and heading the table
    seed_warnings = [line for line in lines if "warning:" in line]
    assert [line.split("]")[0] for line in seed_warnings] == ["[seed 0", "[seed 1"]
    assert "3 of 5 expert moves" in seed_warnings[0] and "1 of 4 expert moves" in seed_warnings[1]
    markdown = (tmp_path / REPORT_MARKDOWN).read_text()
    assert markdown.split("\n")[2] == f"**Warning:** {warning}"
    assert json.loads((tmp_path / REPORT_JSON).read_text())["warnings"] == [warning]
    # every success reading is 0: a note says why the differences are all 0
    assert any(note.startswith("no arm succeeded on any held-out task") for note in report.notes)


def test_a_reply_budget_that_fits_every_expert_move_warns_of_nothing(tmp_path):
    plan = plan_ablation("grouping", {"preset": "smoke", "seeds": 2, "steps": 2, "output_dir": str(tmp_path)})
    for seed in plan.seeds:
        save_warm_start_files(plan, seed, {"plan": {"8": 3}, "tool": {"2": 1}})  # 8 with eos fits a cap of 8
    write_runs(plan)
    report = ablation_report(plan)
    assert report.warnings == ()
    assert not any(note.startswith("no arm succeeded") for note in report.notes)


def test_a_run_whose_last_step_has_no_evaluation_is_not_finished(tmp_path):
    """Stopped after its last training step but before the evaluation there: its step-0 reading is not "after"."""
    plan = plan_ablation("grouping", {"seeds": [0, 1], "steps": 2, "eval_samples": 0, "output_dir": str(tmp_path)})
    write_runs(plan)
    metrics = Path(plan.arm_config(0, "task").output_dir) / METRICS_FILE
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows[-1] = {key: value for key, value in rows[-1].items() if not key.startswith("eval/")}
    metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(RunError, match="the run has not finished"):
        ablation_report(plan)
