"""Coding problem loaders: APPS, CodeContests and LiveCodeBench rows written here, and the shipped HumanEval."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib

import pandas as pd
import pytest

from verl_mas.code_cases import CallCase, ScriptCase, StdinCase
from verl_mas.code_data import humaneval_cases, humaneval_problems, load_code_problems
from verl_mas.code_judge import Program, judge
from verl_mas.env import Task
from verl_mas_envs.code_env import CodeEnv

APPS_STDIN = {
    "problem_id": 7,
    "question": "Print the sum of two integers.",
    "solutions": json.dumps(["a, b = map(int, input().split())\nprint(a + b)\n"]),
    "input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}),
    "starter_code": "",
}
APPS_CALL = {
    "problem_id": 8,
    "question": "Return the larger of two numbers.",
    "solutions": "",
    "input_output": json.dumps({"fn_name": "bigger", "inputs": [[1, 2], [[3], [1]]], "outputs": [[2], [[3]]]}),
    "starter_code": "def bigger(a, b):",
}
CONTEST = {
    "name": "1000_A. Sum",
    "description": "Read two integers and print their sum.",
    "public_tests": {"input": ["1 1\n"], "output": ["2\n"]},
    "private_tests": {"input": ["2 3\n"], "output": ["5\n"]},
    "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]},
    "solutions": {"language": [2, 3], "solution": ["int main(){}", "print(sum(map(int, input().split())))"]},
    "incorrect_solutions": {"language": [3, 1], "solution": ["print(0)", "print 0"]},
}


def lcb_row(private) -> dict:
    return {
        "question_id": "abc001",
        "question_title": "Two sum",
        "question_content": "Return indices of two numbers adding up to target.",
        "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
        "public_test_cases": json.dumps([{"input": "[2, 7, 11]\n9", "output": "[0, 1]", "testtype": "functional"}]),
        "private_test_cases": private,
        "metadata": json.dumps({"func_name": "twoSum"}),
    }


def packed(value) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(value)))).decode()


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_apps_rows_give_stdin_and_function_tasks(tmp_path) -> None:
    stdin, call = load_code_problems(write_jsonl(tmp_path / "apps.jsonl", [APPS_STDIN, APPS_CALL]))
    assert stdin.style == "stdin" and stdin.uid == "apps/7"
    assert stdin.hidden == (StdinCase("1 2\n", "3\n"), StdinCase("5 5\n", "10\n"))
    assert stdin.reference.startswith("a, b =") and call.reference is None
    assert call.style == "function" and call.fn_name == "bigger" and call.starter == "def bigger(a, b):"
    # APPS wraps each return value in a one-element list
    assert call.hidden == (CallCase("1, 2", "2"), CallCase("[3], [1]", "[3]"))


def test_code_contests_rows_split_public_from_hidden_and_keep_python3_programs(tmp_path) -> None:
    frame = pd.DataFrame([CONTEST])
    frame.to_parquet(tmp_path / "cc.parquet")
    [problem] = load_code_problems(tmp_path / "cc.parquet", "code_contests")
    assert problem.visible == (StdinCase("1 1\n", "2\n"),)
    assert problem.hidden == (StdinCase("2 3\n", "5\n"), StdinCase("0 0\n", "0\n"))
    assert problem.reference == "print(sum(map(int, input().split())))" and problem.wrong == ("print(0)",)
    results = judge(Program.for_problem(problem, problem.reference), problem.hidden)
    assert all(r.passed for r in results)


def test_livecodebench_private_cases_may_be_json_or_compressed(tmp_path) -> None:
    cases = [{"input": "[3, 2, 4]\n6", "output": "[1, 2]", "testtype": "functional"}]
    for private in (json.dumps(cases), packed(cases)):
        [problem] = load_code_problems(write_jsonl(tmp_path / "lcb.jsonl", [lcb_row(private)]))
        assert problem.style == "function" and problem.fn_name == "twoSum"
        assert problem.visible == (CallCase("[2, 7, 11], 9", "[0, 1]"),)
        assert problem.hidden == (CallCase("[3, 2, 4], 6", "[1, 2]"),)
    stdin_row = lcb_row("")
    stdin_row["public_test_cases"] = json.dumps([{"input": "1\n", "output": "true\n", "testtype": "stdin"}])
    [problem] = load_code_problems(write_jsonl(tmp_path / "lcb2.jsonl", [stdin_row]), "livecodebench")
    assert problem.style == "stdin" and problem.hidden == (StdinCase("1\n", "true\n"),) and problem.fn_name is None


def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(tmp_path) -> None:
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    hostile = base64.b64encode(zlib.compress(pickle.dumps(Exploit()))).decode()
    with pytest.raises(ValueError, match=r"row 0 \(livecodebench\): private_test_cases: the pickle refers to"):
        load_code_problems(write_jsonl(tmp_path / "lcb.jsonl", [lcb_row(hostile)]))
    assert not marker.exists()


@pytest.mark.parametrize(
    "row, message",
    [
        ({**APPS_STDIN, "input_output": "{oops"}, r"row 1 \(apps\): input_output is not valid JSON"),
        ({**APPS_STDIN, "input_output": json.dumps({"inputs": ["1"], "outputs": []})}, "lists of inputs and outputs"),
        ({k: v for k, v in APPS_STDIN.items() if k != "question"}, "missing key 'question'"),
        ({**APPS_STDIN, "question": "  "}, "question must be non-empty text"),
        ({**APPS_STDIN, "input_output": json.dumps({"inputs": [], "outputs": []})}, "no hidden test case"),
        ({**APPS_CALL, "input_output": json.dumps({"fn_name": "f", "inputs": [5], "outputs": [1]})}, "argument list"),
    ],
)
def test_malformed_rows_name_the_file_and_the_row(tmp_path, row, message) -> None:
    path = write_jsonl(tmp_path / "apps.jsonl", [APPS_STDIN, row])
    with pytest.raises(ValueError, match=message):
        load_code_problems(path, "apps")


def test_unknown_forms_and_rows_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown code data form"):
        load_code_problems(write_jsonl(tmp_path / "a.jsonl", [APPS_STDIN]), "leetcode")
    with pytest.raises(ValueError, match="row 0: not a known code data form"):
        load_code_problems(write_jsonl(tmp_path / "b.jsonl", [{"prompt": "x"}]))
    bad_cases = {**CONTEST, "private_tests": {"input": ["1"], "output": []}}
    with pytest.raises(ValueError, match="private_tests: 1 inputs but 0 outputs"):
        load_code_problems(write_jsonl(tmp_path / "c.jsonl", [bad_cases]))


def test_the_code_env_plays_a_file_problem(tmp_path) -> None:
    rows = [{**APPS_STDIN, "problem_id": n, "question": f"Task {n}: print the sum."} for n in range(40)]
    path = write_jsonl(tmp_path / "apps.jsonl", rows)
    env = CodeEnv(data_file=path, data_form="apps", wrong_programs=1)
    env.load(load_code_problems(path)[0])
    assert env.step("coder", env.expert("coder")).local_reward == 1.0


# --- HumanEval -----------------------------------------------------------------------------------------------------


def test_humaneval_has_its_164_problems_as_function_tasks() -> None:
    problems = humaneval_problems()
    assert len(problems) == 164 and len({p.uid for p in problems}) == 164
    first = problems[0]
    assert first.uid == "HumanEval/0" and first.fn_name == "has_close_elements" and first.style == "function"
    assert first.hidden[0] == CallCase("[1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3", "True")
    assert first.hidden[1] == CallCase("[1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05", "False")
    assert len(first.hidden) == 7


def test_humaneval_asserts_split_into_call_and_script_cases() -> None:
    test = (
        "import math\nMETA = 1\n\ndef check(candidate):\n"
        "    assert candidate(2, k=3) == 5, 'message'\n"
        "    assert 4 == candidate(1, 3)\n"
        "    assert not candidate(0, 0)\n"
        "    assert candidate(1, 1) is True\n"
        "    xs = [1, 2]\n"
        "    assert abs(candidate(*xs) - 3) < 1e-6\n"
        "    for x in range(3):\n"
        "        assert candidate(x, 0) == x\n"
    )
    cases = humaneval_cases(test)
    assert cases[:4] == (
        CallCase("2, k=3", "5"), CallCase("1, 3", "4"), CallCase("0, 0", "False"), CallCase("1, 1", "True"),
    )  # fmt: skip
    assert cases[4] == ScriptCase("import math\nMETA = 1\nxs = [1, 2]\nassert abs(candidate(*xs) - 3) < 1e-06")
    assert isinstance(cases[5], ScriptCase) and cases[5].code.endswith("assert candidate(x, 0) == x")
    assert len(cases) == 6


def test_every_canonical_humaneval_solution_succeeds_through_the_environment_and_a_wrong_one_does_not() -> None:
    env = CodeEnv(source="humaneval", wrong_programs=0)
    for problem in humaneval_problems():
        env.load(problem)
        result = env.clone().step("coder", env.expert("coder"))
        assert (result.local_reward, result.team_reward) == (1.0, 1.0), problem.uid
    for problem in humaneval_problems()[:40]:
        env.load(problem)
        stub = f"```python\ndef {problem.fn_name}(*args, **kwargs):\n    return None\n```"
        assert env.clone().step("coder", stub).team_reward == 0.0, problem.uid


def test_file_split_all_puts_every_problem_of_a_file_in_both_splits(tmp_path) -> None:
    rows = [{**APPS_STDIN, "problem_id": n, "question": f"Task {n}: print the sum."} for n in range(10)]
    path = write_jsonl(tmp_path / "apps.jsonl", rows)
    env = CodeEnv(data_file=path, file_split="all", wrong_programs=0)
    for split in ("train", "eval"):
        seen = set()
        for seed in range(10):
            env.reset(Task(f"t{seed}", "code", seed, split))
            seen.add(env.problem.statement)
        assert len(seen) == 10
    with pytest.raises(ValueError, match="file_split must be one of"):
        CodeEnv(data_file=path, file_split="half")
