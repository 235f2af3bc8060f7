"""research.natural_offsets: the step record from a real (smoke-sized) run, and the page's means by hand."""

from __future__ import annotations

import json

from research.natural_offsets import figures, offsets
from verl_mas.env import make_env
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import train
from verl_mas.overrides import parse_overrides


def test_a_real_run_logs_every_grouping_the_study_keeps(tmp_path):
    config = resolve_train_config(
        parse_overrides(["preset=smoke", "steps=1", f"output_dir={tmp_path}", "progress=false"])
    )
    rows = [row for row in train(config, log=lambda _: None).history if "group_health/groups" in row]
    health = offsets.step_health(rows[0])
    assert set(health) == {f"{g}/{key}" for g in ("task_role_turn", *offsets.COARSER) for key in offsets.KEPT}
    # coarser groupings pool more: never more groups than AT-GRPO's, and AT-GRPO's groups never mix prompts
    assert health["task/groups"] <= health["task_role/groups"] <= health["task_role_turn/groups"]
    assert health["task_role_turn/mixed_prompt_share"] == 0.0


def test_every_env_of_the_design_builds_its_environment(tmp_path):
    for name in offsets.ENVS:
        config = offsets.run_config(tmp_path, name)
        assert config.env == name and (config.seed, config.steps, config.k, config.tasks_per_step) == (0, 10, 4, 8)
        assert make_env(config.env, **config.env_options).workflow().roles  # bad options fail here, not mid-study


def step(task_offset: float, task_zero: float, role_offset: float = 0.5) -> dict:
    return {
        "task/prompt_offset_share": task_offset,
        "task/mixed_prompt_share": 1.0,
        "task/zero_variance_share": task_zero,
        "task_role/prompt_offset_share": role_offset,
        "task_role/mixed_prompt_share": 0.5,
        "task_role/zero_variance_share": 0.0,
        "task_role_turn/zero_variance_share": 0.6,
    }


def test_steps_without_variance_are_left_out_not_read_as_zero(tmp_path):
    records = [
        {"env": "math", "steps": [step(0.0, 1.0), step(0.0, 1.0)], "wall_s": 60.0},  # every task group constant
        {"env": "plan_path", "steps": [step(0.9, 0.0), step(0.0, 1.0), step(0.7, 0.5)], "wall_s": 120.0},
    ]
    (tmp_path / offsets.RUNS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert [r["env"] for r in figures.records(tmp_path)] == ["plan_path", "math"]  # the design's order
    table = figures.offsets_table(tmp_path)
    assert "| plan_path | 0.80 / 1.00 | 0.50 / 0.50 | 0.60 | 3 | 2 |" in table  # (0.9 + 0.7) / 2
    assert "| math | undefined / undefined | 0.50 / 0.50 | 0.60 | 2 | 1 |" in table
    assert figures.headline(tmp_path).endswith("plan_path 0.80 / 0.50; math undefined / 0.50")
    assert figures.tables(tmp_path / "none") == {"offsets": "No run has finished yet.", "headline": "Not run yet."}
