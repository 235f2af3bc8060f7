"""`python -m verl_mas.main` reads a relative --config-path from the current folder, as a user means it (hydra alone
reads it from verl_mas/), and a folder that is not there stops it naming the path and the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import verl_mas.main
from verl_mas.main import config_path_from_cwd
from verl_mas.verl_engine.config import MasConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def recipe(tmp_path) -> Path:
    (tmp_path / "recipes" / "sudoku").mkdir(parents=True)
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--config-path", "recipes/sudoku", "--config-name", "sudoku"], ["--config-path", "{cwd}/recipes/sudoku"]),
        (["-cp", "recipes/sudoku", "-cn", "sudoku"], ["-cp", "{cwd}/recipes/sudoku"]),
        (["--config-path=recipes/sudoku", "a.b=1"], ["--config-path={cwd}/recipes/sudoku"]),
        (["-cp=./recipes/../recipes/sudoku"], ["-cp={cwd}/recipes/sudoku"]),
        (["--config-path", "/elsewhere/recipes", "x=recipes/sudoku"], ["--config-path", "/elsewhere/recipes"]),
        (["--config-path", "pkg://verl_mas.config"], ["--config-path", "pkg://verl_mas.config"]),
        (["mas.env=sudoku", "recipes/sudoku"], ["mas.env=sudoku", "recipes/sudoku"]),  # not a config path
        (["--config-path"], ["--config-path"]),  # no value: hydra's parser says so
        (["--config-path", "--config-name", "x"], ["--config-path", "--config-name"]),
    ],
)
def test_a_relative_config_path_is_read_from_the_current_folder(recipe, argv, expected):
    resolved = config_path_from_cwd(argv, recipe)
    assert resolved[: len(expected)] == [word.format(cwd=recipe) for word in expected]
    assert resolved[len(expected) :] == argv[len(expected) :]


@pytest.mark.parametrize("argv", [["--config-path", "recipes/sudok"], ["-cp=recipes/sudoku/sudoku.yaml"]])
def test_a_config_path_that_is_no_folder_here_names_it_and_the_fix(recipe, argv):
    (recipe / "recipes" / "sudoku" / "sudoku.yaml").write_text("mas: {}\n")
    value = argv[-1].split("=")[-1]
    with pytest.raises(MasConfigError) as raised:
        config_path_from_cwd(argv, recipe)
    message = raised.value.args[0]
    assert message.startswith(f"--config-path {value}: no folder {recipe / value} ")
    assert "give the folder that holds the --config-name yaml" in message


def test_main_run_from_a_checkout_composes_the_recipe_a_relative_path_names():
    command = ["-m", "verl_mas.main", "--config-path", "recipes/sokoban", "--config-name", "sokoban", "--cfg", "job"]
    done = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "env: sokoban" in done.stdout


def test_the_module_reads_a_relative_config_path_from_the_current_folder_before_hydra(recipe, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(verl_mas.main, "main", lambda: started.append(list(sys.argv)))
    monkeypatch.chdir(recipe)
    monkeypatch.setattr(sys, "argv", ["main.py", "--config-path", "recipes/sudoku", "--config-name", "sudoku"])
    verl_mas.main.launch()
    assert started == [["main.py", "--config-path", str(recipe / "recipes" / "sudoku"), "--config-name", "sudoku"]]
    monkeypatch.setattr(sys, "argv", ["main.py", "--config-path", "recipes/sokoban", "--config-name", "sokoban"])
    with pytest.raises(SystemExit) as exited:
        verl_mas.main.launch()
    assert exited.value.code == 2 and len(started) == 1
    assert capsys.readouterr().err.startswith(f"verl_mas.main: --config-path recipes/sokoban: no folder {recipe}/")
