"""recipes/launch.sh without verl-mas on PATH: it takes the checkout's .venv, or stops naming what to do."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_launcher_without_verl_mas_on_path_or_a_venv_says_how_to_get_it(tmp_path):
    recipes = tmp_path / "recipes"
    (recipes / "plan_path").mkdir(parents=True)
    shutil.copy(REPO / "recipes" / "launch.sh", recipes / "launch.sh")
    shutil.copy(REPO / "recipes" / "plan_path" / "plan_path.yaml", recipes / "plan_path" / "plan_path.yaml")
    done = subprocess.run(
        ["bash", str(recipes / "launch.sh"), "plan_path", "1.7b", "shared"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert f"verl-mas is not on PATH and {tmp_path / '.venv' / 'bin' / 'verl-mas'} does not exist" in done.stderr
    assert "source .venv/bin/activate" in done.stderr and not (tmp_path / "data").exists()


def test_the_launcher_without_verl_mas_on_path_takes_the_checkouts_venv(tmp_path):
    recipes = tmp_path / "recipes"
    (recipes / "plan_path").mkdir(parents=True)
    shutil.copy(REPO / "recipes" / "launch.sh", recipes / "launch.sh")
    shutil.copy(REPO / "recipes" / "plan_path" / "plan_path.yaml", recipes / "plan_path" / "plan_path.yaml")
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    for name in ("verl-mas", "python"):  # each records that it ran, and its first arguments
        (venv_bin / name).write_text(f'#!/bin/sh\necho "{name} $1 $2" >> "$HOME/ran"\n')
        (venv_bin / name).chmod(0o755)
    done = subprocess.run(
        ["bash", str(recipes / "launch.sh"), "plan_path", "1.7b", "shared"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran").read_text().splitlines() == ["verl-mas data --env", "python -m verl_mas.main"]
