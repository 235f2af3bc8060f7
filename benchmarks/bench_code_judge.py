"""Hidden-case evaluations per second: the judge (one sandbox run per program for all its cases) versus plain ways.

Three ways run the same stdin program on the same N cases and must agree on every verdict:
- "judge": `verl_mas_envs.code.judge.judge`, one sandboxed run of the harness, each case in a forked child;
- "bare_subprocess_per_case": a plain `python program.py` per case, no sandbox (what an unsandboxed trainer does);
- "sandbox_run_per_case": `verl_mas.sandbox.run_python` per case (the sandbox without batching).
Rounds alternate the ways so load from elsewhere falls on all alike; figures are medians over rounds with the lowest
and highest, and ratios are against the bare subprocess in the same process.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_record import write_record

from verl_mas.sandbox import SandboxLimits, run_python
from verl_mas_envs.code.cases import StdinCase, stdout_matches
from verl_mas_envs.code.judge import JudgeLimits, Program, judge

CASES = 40
ROUNDS = 5
PROGRAM = "n = int(input())\nprint(sum(i * i for i in range(n)) % 1000003)\n"
LIMITS = JudgeLimits(case_time_s=5.0, budget_s=60.0)


def cases(offset: int) -> list[StdinCase]:
    """Cases numbered from `offset`; every third expects a wrong answer, so the verdicts are not all alike."""
    made = []
    for n in range(offset, offset + CASES):
        right = sum(i * i for i in range(n)) % 1000003
        made.append(StdinCase(f"{n}\n", f"{right + (n % 3 == 0)}\n"))
    return made


def by_judge(batch: list[StdinCase]) -> list[bool]:
    return [r.passed for r in judge(Program(PROGRAM, "stdin"), batch, LIMITS)]


def by_bare_subprocess(batch: list[StdinCase]) -> list[bool]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "program.py"
        path.write_text(PROGRAM)
        runs = [
            subprocess.run([sys.executable, str(path)], input=c.input, capture_output=True, text=True, timeout=5)
            for c in batch
        ]
    return [run.returncode == 0 and stdout_matches(c.expected, run.stdout) for c, run in zip(batch, runs, strict=True)]


def by_sandbox_per_case(batch: list[StdinCase]) -> list[bool]:
    runs = [run_python(PROGRAM, c.input, SandboxLimits()) for c in batch]
    return [run.ok and stdout_matches(c.expected, run.stdout) for c, run in zip(batch, runs, strict=True)]


def rate(way: Callable[[list[StdinCase]], list[bool]], batch: list[StdinCase]) -> tuple[float, list[bool]]:
    started = time.perf_counter()
    verdicts = way(batch)
    return len(batch) / (time.perf_counter() - started), verdicts


def main() -> None:
    ways = {
        "bare_subprocess_per_case": by_bare_subprocess,
        "sandbox_run_per_case": by_sandbox_per_case,
        "judge": by_judge,
    }
    for way in ways.values():  # warm: the sandbox's detection, imports, the page cache
        way(cases(10**5)[:2])
    rates: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(ROUNDS):
        batch = cases(100 + round_ * CASES)
        expected = [int(c.input) % 3 != 0 for c in batch]
        for name, way in ways.items():
            per_second, verdicts = rate(way, batch)
            assert verdicts == expected, (name, verdicts)
            rates[name].append(per_second)
    figures = {
        name: {"median": round(statistics.median(r), 1), "min": round(min(r), 1), "max": round(max(r), 1)}
        for name, r in rates.items()
    }
    base = figures["bare_subprocess_per_case"]["median"]
    print(
        f"hidden-case evaluations per second (1 program x {CASES} cases, {ROUNDS} alternating rounds; "
        "median [min, max])"
    )
    for name, figure in figures.items():
        spread = f"[{figure['min']:.1f}, {figure['max']:.1f}]"
        print(f"{name:>26}: {figure['median']:7.1f} {spread:>16}   x{figure['median'] / base:.2f} of a bare subprocess")
    write_record("code_judge", {"cases_per_round": CASES, "rounds": ROUNDS, "evaluations_per_second": figures})


if __name__ == "__main__":
    main()
