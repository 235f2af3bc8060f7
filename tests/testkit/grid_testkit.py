"""Checks shared by the grid-puzzle environment tests (Plan-Path and Sokoban)."""

from __future__ import annotations

import contextlib
import io
import sys

import pytest

from verl_mas.env import Task, split_of
from verl_mas_envs.puzzles.grid import GridPuzzleEnv


def grid_task(env_name: str, seed: int, split: str = "train", **options: object) -> Task:
    return Task(uid=f"t{seed}", env=env_name, seed=seed, split=split, options=options)


def expert_program_moves(env: GridPuzzleEnv, program: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    """Run the code-mode expert program in-process on the start board; the moves it prints."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(env.render(env.board.start) + "\n"))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(program, "expert", "exec"), {"__name__": "__main__"})
    return tuple(printed.getvalue().split())


def start_boards_by_split(env: GridPuzzleEnv, env_name: str, seeds: int) -> dict[str, set[str]]:
    """Rendered start boards of `seeds` tasks per split, each checked to hash into its own split."""
    boards: dict[str, set[str]] = {"train": set(), "eval": set()}
    for split, seen in boards.items():
        for seed in range(seeds):
            env.reset(grid_task(env_name, seed, split))
            board = env.render(env.board.start)
            assert split_of(board) == split
            seen.add(board)
    return boards
