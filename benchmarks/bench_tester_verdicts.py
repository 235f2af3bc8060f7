"""Tester replies judged per second: the task's trusted programs in one sandbox run versus one run per program.

A tester reply's cases are judged on the task's reference and its known-wrong programs. Two ways, on the same
arithmetic tasks (two terms, the training tasks' own mutants) and the same replies, must agree on every verdict:
- "one_run_per_program": `judge_each`, as the environment judged them before (two runs at a time);
- "together": `judge_together`, all of them in one run, each with its own budget (what the environment does now).
Rounds alternate which way goes first, so load from elsewhere falls on both alike; figures are medians over rounds
with the lowest and highest, and the ratio is against one run per program in the same round.

    .venv/bin/python benchmarks/bench_tester_verdicts.py
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence

from bench_record import write_record

from verl_mas_envs.code.cases import CodeProblem, StdinCase
from verl_mas_envs.code.judge import CaseResult, JudgeLimits, Program, judge_each, judge_together
from verl_mas_envs.code.problems import task_problem

REPLIES_PER_ROUND = 24
ROUNDS = 7
LIMITS = JudgeLimits()  # the environment's defaults
Judging = Callable[[Sequence[Program], Sequence[StdinCase], JudgeLimits], list[tuple[CaseResult, ...]]]


def replies(round_: int) -> list[tuple[CodeProblem, tuple[StdinCase, ...]]]:
    """One reply of two cases per task, on inputs no earlier round used (nothing is cached between rounds)."""
    made = []
    for index in range(REPLIES_PER_ROUND):
        problem = task_problem("arithmetic", {"terms": 2}, round_ * REPLIES_PER_ROUND + index, "train")
        base = 1000 * round_ + 10 * index
        made.append((problem, (StdinCase(f"{base} 3\n", "0\n"), StdinCase(f"{base + 1} -2\n", "1\n"))))
    return made


def programs(problem: CodeProblem) -> list[Program]:
    return [Program.for_problem(problem, source) for source in (problem.reference, *problem.wrong)]


def by_runs(ways: Judging, batch: list[tuple[CodeProblem, tuple[StdinCase, ...]]]) -> tuple[float, list]:
    started = time.perf_counter()
    verdicts = [[[r.status for r in one] for one in ways(programs(p), cases, LIMITS)] for p, cases in batch]
    return len(batch) / (time.perf_counter() - started), verdicts


def main() -> None:
    ways: dict[str, Judging] = {"one_run_per_program": judge_each, "together": judge_together}
    for way in ways.values():  # warm: the sandbox's detection, imports, the page cache
        by_runs(way, replies(10**4)[:2])
    rates: dict[str, list[float]] = {name: [] for name in ways}
    program_count = 0
    for round_ in range(ROUNDS):
        batch = replies(round_)
        program_count += sum(len(programs(p)) for p, _ in batch)
        found = {}
        order = list(ways.items()) if round_ % 2 == 0 else list(reversed(ways.items()))
        for name, way in order:
            per_second, found[name] = by_runs(way, batch)
            rates[name].append(per_second)
        assert found["together"] == found["one_run_per_program"], f"the ways disagree in round {round_}"
    figures = {
        name: {"median": round(statistics.median(r), 2), "min": round(min(r), 2), "max": round(max(r), 2)}
        for name, r in rates.items()
    }
    ratios = [t / s for t, s in zip(rates["together"], rates["one_run_per_program"], strict=True)]
    print(
        f"tester replies judged per second ({REPLIES_PER_ROUND} replies x 2 cases a round, "
        f"{program_count / (ROUNDS * REPLIES_PER_ROUND):.2f} programs a reply, {ROUNDS} alternating rounds; "
        "median [min, max])"
    )
    for name, figure in figures.items():
        print(f"{name:>20}: {figure['median']:7.2f}  [{figure['min']:.2f}, {figure['max']:.2f}]")
    print(
        f"together / one run per program, paired by round: x{statistics.median(ratios):.2f} "
        f"[{min(ratios):.2f}, {max(ratios):.2f}]; load average {os.getloadavg()[0]:.1f}"
    )
    ratio = {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3), "max": round(max(ratios), 3)}
    record = {
        "replies_per_round": REPLIES_PER_ROUND,
        "rounds": ROUNDS,
        "programs_per_reply": program_count / (ROUNDS * REPLIES_PER_ROUND),
        "replies_per_second": figures,
        "ratio_together_over_per_program": ratio,
    }
    write_record("tester_verdicts", record)


if __name__ == "__main__":
    main()
