"""research.grouping_ablation.figures: the paired tables, group health and headline, on hand-made runs against
hand-computed values."""

import pytest

from research.grouping_ablation import figures
from research.records import RunCurves

KEYS = tuple(figures.HEALTH)


def run(arm: str, seed: int, sampled: tuple[float, float], zero_variance: float, cost: float = 0.0) -> RunCurves:
    """One arm's run: sampled success at steps 0 and 200 (greedy 0.5 throughout) and its group-health means."""
    health = {key: 0.0 for key in KEYS} | {"group_health/zero_variance_share": zero_variance}
    return RunCurves(
        "plan_path_tool_cost",
        arm,
        seed,
        greedy=((0, 0.5), (200, 0.5)),
        sampled=((0, sampled[0]), (200, sampled[1])),
        labels={"tool_cost": cost, "group_health": health, "wall_s": 60.0},
    )


def runs() -> list[RunCurves]:
    return [
        run("task_role_turn", 0, (0.4, 0.6), 0.5),
        run("task_role", 0, (0.4, 0.5), 0.2),
        run("task", 0, (0.4, 0.3), 0.0),
        run("task_role_turn", 1, (0.2, 0.6), 0.7),
        run("task_role", 1, (0.2, 0.6), 0.2),
        run("task", 1, (0.2, 0.2), 0.0),
        run("task_role_turn", 2, (0.1, 0.9), 0.0),  # seed 2 lacks two arms: in no paired figure, no health mean
    ]


def test_each_arm_is_paired_with_at_grpo_over_the_seeds_whose_arms_all_finished():
    table = figures.level_table(runs(), 0.0)
    # AT-GRPO's gains 0.2 and 0.4: mean 0.3, SE 0.1; t with 1 degree of freedom (12.706) leaves 0 inside
    assert "| `task_role_turn` gain, step 200 minus 0 (validity) | +0.300 (0.100) [-0.971, +1.571] |" in table
    assert "| `task_role` minus `task_role_turn` at step 200 | -0.050 (0.050)" in table  # -0.1 and 0.0
    assert "| `task` minus `task_role_turn` at step 200 | -0.350 (0.050)" in table  # -0.3 and -0.4
    assert "seeds 0, 1 (interim: 2 of 8 seeds; not a result)" in table
    assert "not met (this level is void)" in table


def test_each_arms_own_change_is_paired_over_the_complete_seeds():
    table = figures.gains_table(runs())
    assert (
        "| 0 | `task` | -0.050 (0.050) [-0.685, +0.585] | +0.000 (0.000) [+0.000, +0.000] |" in table
    )  # -0.1 and 0.0; greedy flat
    assert "| 0 | `task_role_turn` | +0.300 (0.100)" in table  # seed 2's +0.8 is left out


def test_group_health_is_averaged_over_the_complete_seeds_only():
    table = figures.health_table(runs())
    assert "| 0 | `task_role_turn` | 0 | 0 | 0.6 | 0 | 0 |" in table  # (0.5 + 0.7) / 2; seed 2's 0.0 left out
    assert "| 0 | `task_role` | 0 | 0 | 0.2 | 0 | 0 |" in table


def test_the_headline_gives_each_levels_gain_and_arm_differences():
    two_levels = runs() + [run(arm, seed, (0.3, 0.3), 0.0, cost=2.0) for arm in figures.ARMS for seed in (0, 1)]
    line = figures.headline(two_levels)
    assert line.startswith("sampled, at step 200: tool cost 0: AT-GRPO's gain +0.300 (0.100)")
    assert "`task` minus it -0.350 (0.050)" in line and line.count("n = 2 seeds") == 2
    assert "tool cost 2: AT-GRPO's gain +0.000 (0.000)" in line
    assert figures.headline(runs()[:4]) == "no level has two seeds with every arm finished"  # no interval yet


def test_a_run_recorded_twice_is_refused_not_picked():
    twice = [*runs(), run("task", 1, (0.2, 0.9), 0.0)]
    with pytest.raises(ValueError, match="tool cost 0, seed 1, arm task: recorded twice"):
        figures.level_table(twice, 0.0)


def test_a_level_without_a_complete_seed_has_no_rows_yet():
    started = [*runs(), run("task_role_turn", 0, (0.4, 0.5), 0.1, cost=2.0)]  # cost 2: one arm of one seed
    for table in (figures.gains_table(started), figures.health_table(started)):
        assert "| 0 | `task` |" in table and "| 2 |" not in table


def test_the_progress_table_gives_the_median_minutes_of_a_levels_runs():
    timed = [
        RunCurves("e", arm, 0, greedy=(), labels={"tool_cost": 0.0, "wall_s": minutes * 60})
        for arm, minutes in zip(("task_role_turn", "task_role", "task", "task"), (1, 2, 4, 8), strict=True)
    ]
    assert "| 0 | 1 | 1 | 2 | 3.0 |" in figures.progress_table(timed)  # (2 + 4) / 2, not the upper middle 4
