"""Owns what a coding task is (statement, style, hidden and visible cases), how a result is compared with a case, and
how cases read as text (a brief prompt's example, a tester's written cases, an output off by one).

Three kinds of case:
- `StdinCase`: the program reads `input` on stdin; it passes when what it prints matches `expected` token by token
  (whitespace-insensitive; a token that reads as a decimal number may differ by a relative 1e-6).
- `CallCase`: the task's function is called with `args`, the source of an argument list of Python literals
  (`[1, 2], k=3`); it passes when the returned value, sent back as its literal source, equals `expected`.
- `ScriptCase`: dataset test code (asserts that are not a plain call and a literal) run after the program with
  `candidate` bound to the function; it passes when it raises nothing.
For stdin and call cases the expected result never enters the sandbox: the program's actual output comes back and is
compared here, so no program can pass a case by tampering with its own verdict. A script case's verdict is reached
inside the sandbox, next to the program (docs/code.md says what that allows).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Style = Literal["stdin", "function"]
STYLES: tuple[Style, ...] = ("stdin", "function")
FLOAT_REL_TOL = 1e-6
FLOAT_ABS_TOL = 1e-9


@dataclass(frozen=True)
class StdinCase:
    """The program with `input` on stdin must print `expected`."""

    input: str
    expected: str

    def __post_init__(self) -> None:
        if not (isinstance(self.input, str) and isinstance(self.expected, str)):
            raise ValueError(f"a stdin case needs text input and expected output, got {self!r}")


@dataclass(frozen=True)
class CallCase:
    """The function called with `args` (literal argument-list source) must return `expected` (a literal's source)."""

    args: str
    expected: str

    def __post_init__(self) -> None:
        call_arguments(self.args)
        literal_value(self.expected)


@dataclass(frozen=True)
class ScriptCase:
    """Test code run with `candidate` bound to the task's function; passes when it raises nothing."""

    code: str

    def __post_init__(self) -> None:
        if not isinstance(self.code, str) or not self.code.strip():
            raise ValueError("a script case needs test code")
        ast.parse(self.code)


TestCase = StdinCase | CallCase | ScriptCase


@dataclass(frozen=True)
class CodeProblem:
    """A coding task.

    Attributes:
        uid: where it comes from (`HumanEval/0`, `codeio/17`, a file's row).
        statement: what the coder and the tester read.
        style: "stdin": a program reading stdin and printing; "function": a function named `fn_name`.
        hidden: the cases that decide success; never shown to a role.
        visible: examples the statement already shows (shown to both roles).
        starter: code the coder starts from (a function's signature and docstring), shown in the prompt.
        prelude: code run before every program (HumanEval's prompt: its imports and helper functions).
        reference: a correct program, when the data has one (judges the tester's cases).
        wrong: programs known to fail some hidden case (the tester's cases should catch them).
    """

    uid: str
    statement: str
    style: Style
    hidden: tuple[TestCase, ...]
    visible: tuple[TestCase, ...] = ()
    fn_name: str | None = None
    starter: str = ""
    prelude: str = ""
    reference: str | None = None
    wrong: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        where = f"code problem {self.uid!r}"
        if self.style not in STYLES:
            raise ValueError(f"{where}: style must be one of {STYLES}, got {self.style!r}")
        if not (isinstance(self.statement, str) and self.statement.strip()):
            raise ValueError(f"{where}: empty statement")
        if not self.hidden:
            raise ValueError(f"{where}: no hidden test case")
        if self.style == "function" and not (isinstance(self.fn_name, str) and self.fn_name.isidentifier()):
            raise ValueError(f"{where}: a function-style problem needs fn_name, got {self.fn_name!r}")
        allowed = (StdinCase,) if self.style == "stdin" else (CallCase, ScriptCase)
        for case in (*self.hidden, *self.visible):
            if not isinstance(case, allowed):
                raise ValueError(f"{where}: a {self.style} problem cannot have a {type(case).__name__}")


def call_arguments(source: str) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword values of an argument-list source made of literals; ValueError otherwise."""
    if not isinstance(source, str):
        raise ValueError(f"call arguments must be text, got {source!r}")
    try:
        call = ast.parse(f"f({source})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"not an argument list: {source[:200]!r}") from exc
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise ValueError(f"not an argument list: {source[:200]!r}")
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise ValueError(f"argument unpacking is not a literal argument list: {source[:200]!r}")
    try:
        positional = [ast.literal_eval(node) for node in call.args]
        keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
        raise ValueError(f"call arguments must be literals: {source[:200]!r}") from exc
    return positional, keywords


def literal_value(source: str) -> Any:
    """The value of a Python literal's source; ValueError if it is not one."""
    if not isinstance(source, str):
        raise ValueError(f"a literal must be text, got {source!r}")
    try:
        return ast.literal_eval(source.strip())
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError) as exc:
        raise ValueError(f"not a Python literal: {source[:200]!r}") from exc


def values_equal(expected: Any, actual: Any) -> bool:
    """Python's `==`, except that floats compare within FLOAT_REL_TOL (a program's 0.30000000000000004 is 0.3) and
    a list equals a tuple of equal items (JSON, where most sets' answers come from, has lists only)."""
    if _is_number(expected) and _is_number(actual):
        if isinstance(expected, float) or isinstance(actual, float):
            if math.isnan(expected) or math.isnan(actual):
                return math.isnan(expected) and math.isnan(actual)
            return math.isclose(expected, actual, rel_tol=FLOAT_REL_TOL, abs_tol=FLOAT_ABS_TOL)
        return expected == actual
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(expected) == len(actual)
            and all(values_equal(e, a) for e, a in zip(expected, actual, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and expected.keys() == actual.keys()
            and all(values_equal(expected[key], actual[key]) for key in expected)
        )
    return expected == actual


def stdout_matches(expected: str, actual: str) -> bool:
    """Whether printed output matches the expected output, token by token (numbers with a decimal point or an
    exponent in the expected output may differ by FLOAT_REL_TOL)."""
    wanted, got = expected.split(), actual.split()
    return len(wanted) == len(got) and all(_token_matches(w, g) for w, g in zip(wanted, got, strict=True))


def _token_matches(expected: str, actual: str) -> bool:
    if expected == actual:
        return True
    if not any(mark in expected for mark in ".eE"):
        return False
    try:
        wanted, got = float(expected), float(actual)
    except ValueError:
        return False
    if not (math.isfinite(wanted) and math.isfinite(got)):
        return False
    return math.isclose(wanted, got, rel_tol=FLOAT_REL_TOL, abs_tol=FLOAT_REL_TOL)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float)  # bools too: True == 1, as in Python


def brief_example(case: TestCase, problem: CodeProblem) -> str:
    """A statement's example in a brief prompt: `9 2 -> 27`, or `f(1, 2) -> 3`."""
    if isinstance(case, StdinCase):
        return f"{case.input.strip()} -> {case.expected.strip()}"
    return f"{problem.fn_name}({case.args}) -> {case.expected}" if isinstance(case, CallCase) else case.code.strip()


def written_cases(cases: Sequence[TestCase], problem: CodeProblem) -> str:
    """Cases as a tester writes them."""
    if problem.style == "stdin":
        return "\n".join(f"```input\n{c.input.rstrip()}\n```\n```output\n{c.expected.rstrip()}\n```" for c in cases)
    lines = [f"assert {problem.fn_name}({c.args}) == {c.expected}" for c in cases if isinstance(c, CallCase)]
    return "```python\n" + "\n".join(lines) + "\n```"


def off_by_one(case: TestCase) -> str | None:
    """The case's expected output plus one, when it is an integer (a stdin line or a call's int literal)."""
    if isinstance(case, StdinCase) and re.fullmatch(r"-?\d+", case.expected.strip()):
        return str(int(case.expected) + 1)
    if isinstance(case, CallCase):
        value = literal_value(case.expected)
        if isinstance(value, int) and not isinstance(value, bool):
            return repr(value + 1)
    return None
