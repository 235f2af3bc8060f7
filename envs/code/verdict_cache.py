"""The judge's verdicts kept for reuse: cached judging (a replayed move runs nothing) and known-wrong programs."""

from __future__ import annotations

import ast
import functools

from .cases import CodeProblem, TestCase
from .judge import CaseResult, JudgeLimits, Program, infra_failure, judge_together
from .mutants import mutants


class _NotJudged(Exception):
    """The judge could not run a program: raised through the cache so that the failure is not remembered."""

    def __init__(self, results: tuple[tuple[CaseResult, ...], ...]) -> None:
        super().__init__("the judge could not run a program")
        self.results = results


def judged(program: Program, cases: tuple[TestCase, ...], limits: JudgeLimits) -> tuple[CaseResult, ...]:
    """One program's verdicts, through `judged_together`'s cache."""
    return judged_together((program,), cases, limits)[0]


def judged_together(
    programs: tuple[Program, ...], cases: tuple[TestCase, ...], limits: JudgeLimits
) -> tuple[tuple[CaseResult, ...], ...]:
    """`judge_together` (several programs: only a task's trusted ones), cached. Judging is deterministic given its
    inputs: the rollout's replay of a chosen move then costs no sandbox run. A run the judge could not make is not
    cached: the next call tries again."""
    if not programs:
        return ()
    try:
        return _judged_and_cached(programs, cases, limits)
    except _NotJudged as failed:
        return failed.results


@functools.lru_cache(maxsize=1024)
def _judged_and_cached(
    programs: tuple[Program, ...], cases: tuple[TestCase, ...], limits: JudgeLimits
) -> tuple[tuple[CaseResult, ...], ...]:
    results = tuple(judge_together(programs, cases, limits))
    if any(infra_failure(one) is not None for one in results):
        raise _NotJudged(results)
    return results


@functools.lru_cache(maxsize=256)
def known_wrong_programs(problem: CodeProblem, count: int, limits: JudgeLimits) -> tuple[str, ...]:
    """The task's wrong programs and up to `count` mutants of its reference that fail some hidden case (a mutant the
    judge could not run is not known to fail), none of them the same program as an earlier one written otherwise: a
    program counted twice would count twice in the tester's catch share."""
    found = list(problem.wrong)
    if problem.reference is not None and count:
        candidates = mutants(problem.reference, count * 3, problem.uid)
        programs = [Program.for_problem(problem, source) for source in candidates]
        seen = {_program_form(source) for source in found}
        for source, results in zip(candidates, judge_together(programs, problem.hidden, limits), strict=True):
            fails = not all(r.passed for r in results) and infra_failure(results) is None
            form = _program_form(source)
            if len(found) - len(problem.wrong) < count and fails and form not in seen:
                found.append(source)
                seen.add(form)
    return tuple(found)


def _program_form(source: str) -> str:
    """The program as its syntax tree (layout, comments and quotes left out); its stripped text when it does not
    parse."""
    try:
        return ast.dump(ast.parse(source))
    except (SyntaxError, ValueError):
        return source.strip()
