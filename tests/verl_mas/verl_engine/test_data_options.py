"""main's data check compares the environment each side builds (options after defaults), not the text written."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from verl_mas import cli
from verl_mas.main import check_config, check_data_files
from verl_mas.verl_engine.config import MasConfig, MasConfigError

RECIPES = Path(__file__).resolve().parents[3] / "recipes"


def written(out: Path, env: str, options: list[str]) -> Path:
    assert cli.main(["data", "--env", env, "--out", str(out), "--train", "2", "--eval", "1", *options]) == 0
    return out / "train.parquet"


def test_data_written_without_options_runs_with_the_sokoban_recipe(tmp_path):
    """docs/gpu.md's "Prepare the data" (`verl-mas data --env sokoban --out D`), then the sokoban recipe, whose
    `mas.env_options` spell out `single_agent: false`: the same environment, so the run starts."""
    data = tmp_path / "sokoban"
    written(data, "sokoban", [])
    overrides = [f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'eval.parquet'}"]
    with initialize_config_dir(config_dir=str(RECIPES / "sokoban"), version_base=None):
        config = compose("sokoban", overrides=["+platform=cpu", *overrides])
    assert dict(config.mas.env_options) == {"single_agent": False}
    assert check_config(config).env == "sokoban"


@pytest.mark.parametrize(
    "written_with, launched_with",
    [
        ([], {"single_agent": False, "max_turns": 5, "tool_mode": "code"}),  # every default, spelled out
        (["single_agent=false", "code_time_limit_s=5"], {}),  # the other way round; 5 and 5.0 are one value
        (["size=6", "boxes=1"], {"wall_ratio": 0.1}),  # different defaults spelled out on each side
    ],
)
def test_options_that_resolve_alike_are_one_environment(tmp_path, written_with, launched_with):
    train = written(tmp_path / "data", "sokoban", written_with)
    check_data_files("data.train_files", str(train), MasConfig(env="sokoban", env_options=launched_with))


@pytest.mark.parametrize(
    "written_with, launched_with, differ",
    [
        ([], {"single_agent": True}, "single_agent (row: False, mas.env_options: True)"),
        (["size=7"], {"single_agent": False}, "size (row: 7, mas.env_options: 6)"),
        (["max_turns=3"], {"max_turns": 4}, "max_turns (row: 3, mas.env_options: 4)"),
    ],
)
def test_options_that_really_differ_are_still_refused_naming_the_difference(
    tmp_path, written_with, launched_with, differ
):
    train = written(tmp_path / "data", "sokoban", written_with)
    with pytest.raises(MasConfigError, match=r"row 0 was written with options") as refused:
        check_data_files("data.train_files", str(train), MasConfig(env="sokoban", env_options=launched_with))
    assert f"with the defaults filled in they differ in {differ}" in str(refused.value)


def test_problem_source_options_stay_free_after_resolving(tmp_path):
    """Rows may name another problem source than mas.env_options (an option math resolves: source_options None
    -> {}); everything else must still match."""
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(f'{{"problem": "What is {n} + {n}?", "answer": "{2 * n}"}}\n' for n in range(6)))
    rows = written(tmp_path / "file", "math", [f"data_file={problems}", "file_split=all"])
    check_data_files("data.train_files", str(rows), MasConfig(env="math", env_options={"source_options": None}))
    check_data_files("data.train_files", str(rows), MasConfig(env="math", env_options={"max_turns": 3}))
    with pytest.raises(MasConfigError, match=r"differ in max_turns \(row: 3, mas.env_options: 2\)"):
        check_data_files("data.train_files", str(rows), MasConfig(env="math", env_options={"max_turns": 2}))


def test_resolved_options_fill_in_every_default():
    from verl_mas.main import resolved_env_options

    assert resolved_env_options("sokoban", {}) == resolved_env_options("sokoban", {"single_agent": False})
    assert resolved_env_options("sokoban", {"size": 7})["size"] == 7
    assert resolved_env_options("sokoban", {})["boxes"] == 1
    with pytest.raises(MasConfigError, match=r"for environment 'sokoban'"):
        resolved_env_options("sokoban", {"size": 2})
