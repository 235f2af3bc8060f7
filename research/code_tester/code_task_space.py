"""How many distinct arithmetic programs the code runs' task sets hold, and how many the warm start already showed.

Each arithmetic task is one expression with fresh inputs, so two tasks with the same expression ask for the same
program. For each `terms` setting this counts the distinct expressions of the held-out tasks, the warm start's tasks and
the RL steps' tasks (the same draws as the learning harness's runs: `split_tasks` with the run's seed and options), and
the share of RL tasks whose expression the warm start's data already held. No training; prints a Markdown table.

    python -m research.code_tester.code_task_space --seeds 0 1 2 --terms 1 2
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from verl_mas.dataset import split_tasks
from verl_mas.local.warm_start import WARM_START_FIRST_INDEX
from verl_mas_envs.code.problems import check_options, task_problem


@dataclass(frozen=True)
class TaskSpace:
    """The distinct expressions of one seed's three task sets."""

    terms: int
    seed: int
    eval_tasks: int
    eval_expressions: int
    warm_expressions: int
    rl_tasks: int
    rl_expressions: int
    rl_tasks_seen_in_warm_start: float  # share of RL tasks whose expression a warm-start task had


def expressions(split: str, count: int, seed: int, options: dict, start: int = 0) -> list[str]:
    """The expression (the problem's uid) of each of `count` arithmetic tasks of `split`."""
    tasks = split_tasks("code", split, count, seed, {}, start)
    return [task_problem("arithmetic", options, task.seed, split).uid for task in tasks]


def task_space(terms: int, seed: int, eval_tasks: int, warm_tasks: int, rl_tasks: int) -> TaskSpace:
    options = {"terms": terms, "variables": 2}
    held_out = expressions("eval", eval_tasks, seed, options)
    warm = set(expressions("train", warm_tasks, seed, options, WARM_START_FIRST_INDEX))
    rl = expressions("train", rl_tasks, seed, options)
    return TaskSpace(
        terms=terms,
        seed=seed,
        eval_tasks=eval_tasks,
        eval_expressions=len(set(held_out)),
        warm_expressions=len(warm),
        rl_tasks=rl_tasks,
        rl_expressions=len(set(rl)),
        rl_tasks_seen_in_warm_start=sum(uid in warm for uid in rl) / len(rl),
    )


def table(spaces: Sequence[TaskSpace], warm_tasks: int) -> str:
    header = (
        f"| terms | seed | held-out tasks | their expressions | warm start's expressions ({warm_tasks} tasks) "
        "| RL tasks | their expressions | RL tasks whose expression the warm start had |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for space in spaces:
        lines.append(
            f"| {space.terms} | {space.seed} | {space.eval_tasks} | {space.eval_expressions} "
            f"| {space.warm_expressions} | {space.rl_tasks} | {space.rl_expressions} "
            f"| {space.rl_tasks_seen_in_warm_start:.3f} |"
        )
    for terms in sorted({space.terms for space in spaces}):
        rows = [space for space in spaces if space.terms == terms]
        mean_eval = statistics.mean(space.eval_expressions for space in rows)
        lines.append(f"\nterms={terms}: {mean_eval:.1f} distinct expressions per held-out set on average.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m research.code_tester.code_task_space",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--terms", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--eval-tasks", type=int, default=64)
    parser.add_argument("--warm-tasks", type=int, default=1024)
    parser.add_argument("--rl-tasks", type=int, default=480, help="steps x tasks per step (default: 60 x 8)")
    args = parser.parse_args(argv)
    for flag, count in (
        ("--eval-tasks", args.eval_tasks),
        ("--warm-tasks", args.warm_tasks),
        ("--rl-tasks", args.rl_tasks),
    ):
        if count < 1:
            parser.error(f"{flag} must be at least 1, got {count}")
    for terms in args.terms:
        try:
            check_options("arithmetic", {"terms": terms, "variables": 2})
        except ValueError as error:
            parser.error(f"--terms: {error}")
    spaces = [
        task_space(terms, seed, args.eval_tasks, args.warm_tasks, args.rl_tasks)
        for terms in args.terms
        for seed in args.seeds
    ]
    print(table(spaces, args.warm_tasks))


if __name__ == "__main__":
    main()
