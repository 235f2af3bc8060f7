"""The problem of a math task: drawn from a reasoning-gym generator or picked from a problem file, per split.

Both keep train and eval apart by `verl_mas.env.split_of` of the problem text, so no problem is in both splits.
Generated: draws (seeded by the task seed and the attempt) until the problem's split is the task's. From a file:
the file's problems of the task's split, the task seed picking one; a file is read once per process and again
when it changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl_mas_envs.common import draw_board
from verl_mas_envs.problem_team import FileSplit, file_by_split, pick

from .data import Form, MathProblem, load_problems


def generated_problem(source: str, source_options: Mapping[str, Any], seed: int, split: str) -> MathProblem:
    """The problem of (seed, split) from the reasoning-gym dataset `source` built with `source_options`."""

    def candidate(rng: Any) -> MathProblem:
        return _generate(source, source_options, rng.getrandbits(62))

    return draw_board(f"math/{source}", seed, split, candidate, lambda problem: problem.problem)


def check_source(source: str, source_options: Mapping[str, Any]) -> None:
    """ValueError naming the problem when `source` with `source_options` cannot generate problems with answers."""
    try:
        _generate(source, source_options, 0)
    except ValueError:
        raise
    except Exception as exc:  # reasoning-gym rejects bad configs with assertions and TypeErrors
        raise ValueError(f"math source {source!r} with options {dict(source_options)!r}: {exc!r}") from exc


def file_problem(path: str, form: Form, seed: int, split: str, file_split: FileSplit = "hash") -> MathProblem:
    """The problem of (seed, split) among the problems of `split` in the file at `path`."""
    return pick(file_problems(path, form, file_split)[split], seed, path, split)


def file_problems(path: str, form: Form, file_split: FileSplit = "hash") -> dict[str, tuple[MathProblem, ...]]:
    """The problems of the file at `path` by split (read once per process while the file is unchanged)."""
    return file_by_split(path, form, load_problems, _text, "math", file_split)


def _text(problem: MathProblem) -> str:
    return problem.problem


def _generate(source: str, source_options: Mapping[str, Any], seed: int) -> MathProblem:
    import reasoning_gym  # imported when first needed: it takes a second or two

    if source not in reasoning_gym.factory.DATASETS:
        raise ValueError(f"unknown math source {source!r}; reasoning-gym has {sorted(reasoning_gym.factory.DATASETS)}")
    entry = reasoning_gym.create_dataset(source, seed=seed, size=1, **source_options)[0]
    question, answer = entry.get("question"), entry.get("answer")
    if not (isinstance(question, str) and question.strip() and answer is not None and str(answer).strip()):
        raise ValueError(f"math source {source!r} gave an entry without a question and an answer: {entry!r}")
    return MathProblem(question.strip(), str(answer).strip())
