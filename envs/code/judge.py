"""Owns judging programs on test cases: one sandbox run per program (or per set of trusted ones), verdicts outside."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from verl_mas.sandbox import SandboxLimits, run_python

from . import harness
from .cases import (
    CallCase,
    CodeProblem,
    ScriptCase,
    StdinCase,
    Style,
    TestCase,
    literal_value,
    stdout_matches,
    values_equal,
)

HARNESS_OVERHEAD_S = 2.0  # the sandbox's start and the harness's own work, on top of the cases' budget
SHOWN_CHARS = 300  # of an actual output or an error, in a CaseResult
INFRA = "infra"  # the status of a case the judge could not run


@dataclass(frozen=True)
class JudgeLimits:
    """Time and size limits of judging one program.

    Attributes:
        case_time_s: wall time of one case.
        budget_s: wall time of all the program's cases together; cases after it is spent fail as "not_run".
        memory_mb: address space of each process.
        output_bytes: what is kept of one case's output; more is an "output_limit" failure.
    """

    case_time_s: float = 2.0
    budget_s: float = 10.0
    memory_mb: int = 512
    output_bytes: int = 16_000

    def __post_init__(self) -> None:
        for key in ("case_time_s", "budget_s", "memory_mb", "output_bytes"):
            value = getattr(self, key)
            if not (isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf):
                raise ValueError(f"JudgeLimits.{key} must be a positive finite number, got {value!r}")


@dataclass(frozen=True)
class CaseResult:
    """A program on one case.

    Attributes:
        passed: the case's expected result was met.
        status: "passed", "wrong" (ran, result differs) or why it did not run to a result: "error", "timeout",
            "output_limit", "syntax_error", "no_function", "bad_return", "not_run", "crash" (the run failed), or
            "infra": the judge could not run it (the sandbox or the harness failed, and failed again when retried):
            not the program's fault, see `infra_failure`.
        actual: what the program printed or returned, or its error (short).
    """

    passed: bool
    status: str
    actual: str


@dataclass(frozen=True)
class Program:
    """What a program is judged as: its source, how it is run, and the code run before it."""

    source: str
    style: Style
    fn_name: str | None = None
    prelude: str = ""

    @classmethod
    def for_problem(cls, problem: CodeProblem, source: str) -> Program:
        return cls(source, problem.style, problem.fn_name, problem.prelude)


def judge(program: Program, cases: Sequence[TestCase], limits: JudgeLimits = JudgeLimits()) -> tuple[CaseResult, ...]:
    """Run `program` on every case in one sandbox run and compare each result with the case's expected one."""
    return judge_together((program,), cases, limits)[0]


def judge_together(
    programs: Sequence[Program], cases: Sequence[TestCase], limits: JudgeLimits = JudgeLimits()
) -> list[tuple[CaseResult, ...]]:
    """`judge` for several programs of one problem in a single sandbox run, each with its own time budget.

    Only for trusted programs (a task's reference and its known-wrong programs): a program can kill the harness,
    which would take the verdicts of every program in the run with it. Model-written programs go through `judge` or
    `judge_each`, one run each. A shared run that ends without its results (or could not start) is judged again one
    program a run, so that one trusted program that kills the harness loses only its own verdicts."""
    if not programs:
        return []
    if not cases:
        return [() for _ in programs]
    first = programs[0]
    if any((p.style, p.fn_name, p.prelude) != (first.style, first.fn_name, first.prelude) for p in programs):
        raise ValueError("judge_together runs programs of one problem: their style, fn_name and prelude must agree")
    job = {
        "programs": [f"{p.prelude}\n{p.source}" if p.prelude else p.source for p in programs],
        "style": first.style,
        "fn_name": first.fn_name,
        "cases": [_case_job(case) for case in cases],
        "case_time_s": limits.case_time_s,
        "budget_s": limits.budget_s,
        "output_bytes": limits.output_bytes,
    }
    wall = len(programs) * limits.budget_s + HARNESS_OVERHEAD_S
    per_program_bytes = len(cases) * 6 * (limits.output_bytes + harness.ERROR_CHARS + 100)  # JSON escapes
    sandbox_limits = SandboxLimits(
        wall_time_s=wall,
        cpu_time_s=math.ceil(wall),
        memory_mb=limits.memory_mb,
        max_output_bytes=len(programs) * per_program_bytes + 4096,
    )
    shape = (len(programs), len(cases))
    payload = json.dumps(job)
    run = run_python(_harness_source(), payload, sandbox_limits)  # a failed sandbox is retried in there
    reports = _reports(run.stdout, shape)
    if reports is not None and any(r["status"] == INFRA for one in reports for r in one):  # the harness failed
        run = run_python(_harness_source(), payload, sandbox_limits)
        reports = _reports(run.stdout, shape)
    if len(programs) > 1 and (run.infra_error is not None or reports is None):
        return judge_each(programs, cases, limits)
    if run.infra_error is not None:
        return [tuple(CaseResult(False, INFRA, run.infra_error[:SHOWN_CHARS]) for _ in cases) for _ in programs]
    if reports is None:
        why = "timeout" if run.timed_out else "crash"
        detail = (run.stderr.strip().splitlines() or [f"the judge's run ended with {run.exit_code}"])[-1]
        return [tuple(CaseResult(False, why, detail[:SHOWN_CHARS]) for _ in cases) for _ in programs]
    return [tuple(_verdict(case, report) for case, report in zip(cases, one, strict=True)) for one in reports]


def judge_each(
    programs: Sequence[Program],
    cases: Sequence[TestCase],
    limits: JudgeLimits = JudgeLimits(),
    workers: int = 2,
    run: Callable[[Program, Sequence[TestCase], JudgeLimits], tuple[CaseResult, ...]] = judge,
) -> list[tuple[CaseResult, ...]]:
    """`run` (`judge`, or a caller's cached `judge`) for several programs, their sandbox runs `workers` at a time (one
    program's run never holds another's cases' results, so no program can tamper with another's verdicts)."""
    if len(programs) <= 1 or workers <= 1:
        return [run(program, cases, limits) for program in programs]
    with ThreadPoolExecutor(min(workers, len(programs)), thread_name_prefix="verl_mas_judge") as pool:
        return list(pool.map(lambda program: run(program, cases, limits), programs))


def infra_failure(results: Sequence[CaseResult]) -> str | None:
    """Why the judge could not run a program on some case (the sandbox or the harness failed); None when it could."""
    return next((result.actual for result in results if result.status == INFRA), None)


def pass_rate(results: Sequence[CaseResult]) -> float:
    return sum(r.passed for r in results) / len(results) if results else 0.0


@cache
def _harness_source() -> str:
    return Path(harness.__file__).read_text(encoding="utf-8")


def _case_job(case: TestCase) -> dict[str, str]:
    if isinstance(case, StdinCase):
        return {"kind": "stdin", "input": case.input}
    if isinstance(case, CallCase):
        return {"kind": "call", "args": case.args}
    if isinstance(case, ScriptCase):
        return {"kind": "script", "code": case.code}
    raise TypeError(f"not a test case: {case!r}")


def _reports(stdout: str, shape: tuple[int, int]) -> list[list[dict]] | None:
    """The harness's results line (the last one carrying its mark): one list of case reports per program, as many as
    `shape` says; None when the run produced none of that shape."""
    programs, cases = shape
    for line in reversed(stdout.split("\n")):
        if line.startswith(harness.MARK):
            try:
                reports = json.loads(line[len(harness.MARK) :])
            except ValueError:
                return None
            valid = isinstance(reports, list) and len(reports) == programs
            valid = valid and all(isinstance(one, list) and len(one) == cases for one in reports)
            if valid and all(isinstance(r, dict) and isinstance(r.get("status"), str) for one in reports for r in one):
                return reports
            return None
    return None


def _verdict(case: TestCase, report: dict) -> CaseResult:
    status, output = report["status"], str(report.get("output", ""))
    if status != "ok":
        error = str(report.get("error", "")).strip()
        return CaseResult(False, status, (error.splitlines() or [status])[-1][:SHOWN_CHARS])
    if isinstance(case, StdinCase):
        passed = stdout_matches(case.expected, output)
    elif isinstance(case, CallCase):
        try:
            passed = values_equal(literal_value(case.expected), literal_value(output))
        except ValueError:
            passed = False
    else:
        passed = True
    return CaseResult(passed, "passed" if passed else "wrong", output[:SHOWN_CHARS])
