"""The tester's reply read into cases: ```input/```output pairs (stdin tasks) or `assert f(args) == value` lines."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from verl_mas.env.replies import answer_part, extract_python

from .cases import CallCase, CodeProblem, StdinCase, TestCase

_FENCED = re.compile(r"```[ \t]*(input|output)[ \t]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class TesterReply:
    """The cases read from a tester's reply, and how many more it wrote that are not usable cases (`repeats`: those
    of them that are well-formed cases of an input given earlier in the reply)."""

    cases: tuple[TestCase, ...]
    degenerate: int
    repeats: tuple[TestCase, ...] = ()


def read_tester_reply(text: str, problem: CodeProblem, limit: int) -> TesterReply:
    """The tester's first `limit` cases; malformed and repeated ones are counted as degenerate."""
    part = answer_part(text)
    found: list[TestCase] = []
    repeats: list[TestCase] = []
    degenerate = 0
    for case in _stdin_cases(part) if problem.style == "stdin" else _call_cases(part, problem.fn_name or ""):
        if len(found) + degenerate >= limit:
            break
        if case is None or _empty(case):
            degenerate += 1
        elif any(_same_input(case, seen) for seen in found):
            degenerate += 1
            repeats.append(case)
        else:
            found.append(case)
    return TesterReply(tuple(found), degenerate, tuple(repeats))


def _stdin_cases(part: str) -> list[StdinCase | None]:
    blocks = [(match.group(1), match.group(2)) for match in _FENCED.finditer(part)]
    cases: list[StdinCase | None] = []
    index = 0
    while index < len(blocks):
        kind, body = blocks[index]
        if kind == "input" and index + 1 < len(blocks) and blocks[index + 1][0] == "output":
            cases.append(StdinCase(body, blocks[index + 1][1]))
            index += 2
        else:
            cases.append(None)  # an input without its output, or an output without its input
            index += 1
    return cases


def _call_cases(part: str, fn_name: str) -> list[CallCase | None]:
    source = extract_python(part) or part
    cases: list[CallCase | None] = []
    for line in source.splitlines():
        if line.strip().startswith("assert"):
            cases.append(_call_case(line.strip(), fn_name))
    return cases


def _call_case(line: str, fn_name: str) -> CallCase | None:
    """`assert f(args) == value` (or `value == f(args)`, `assert f(args)`, `assert not f(args)`) as a case."""
    try:
        test = ast.parse(line, mode="exec").body[0]
    except (SyntaxError, ValueError, RecursionError, MemoryError, IndexError):
        return None
    if not isinstance(test, ast.Assert):
        return None
    expression, expected = test.test, "True"
    if isinstance(expression, ast.UnaryOp) and isinstance(expression.op, ast.Not):
        expression, expected = expression.operand, "False"
    elif isinstance(expression, ast.Compare) and len(expression.ops) == 1 and isinstance(expression.ops[0], ast.Eq):
        left, right = expression.left, expression.comparators[0]
        expression, value = (left, right) if _calls(left, fn_name) else (right, left)
        expected = ast.unparse(value)
    if not _calls(expression, fn_name):
        return None
    assert isinstance(expression, ast.Call)
    arguments = [ast.unparse(a) for a in expression.args] + [
        f"{k.arg}={ast.unparse(k.value)}" for k in expression.keywords
    ]
    try:
        return CallCase(", ".join(arguments), expected)
    except (ValueError, RecursionError):
        return None


def _calls(node: ast.expr, fn_name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == fn_name


def _same_input(case: TestCase, other: TestCase) -> bool:
    if isinstance(case, StdinCase) and isinstance(other, StdinCase):
        return case.input.split() == other.input.split()
    return isinstance(case, CallCase) and isinstance(other, CallCase) and case.args == other.args


def _empty(case: TestCase) -> bool:
    return isinstance(case, StdinCase) and not case.input.strip() and not case.expected.strip()
