"""Coding problem loaders: APPS, CodeContests and LiveCodeBench rows written here, and the shipped HumanEval."""

from __future__ import annotations

import ast
import base64
import json
import os
import pickle
import zlib

import pandas as pd
import pytest

from verl_mas.env import Task
from verl_mas_envs.code.cases import CallCase, ScriptCase, StdinCase, call_arguments, literal_value
from verl_mas_envs.code.data import humaneval_cases, humaneval_problems, load_code_problems
from verl_mas_envs.code.env import CodeEnv
from verl_mas_envs.code.judge import Program, judge

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


def packed(value, encode=json.dumps) -> str:
    """LiveCodeBench's compressed form: base64 of zlib of a pickle of the JSON text."""
    return base64.b64encode(zlib.compress(pickle.dumps(encode(value)))).decode()


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


def test_apps_parquet_with_json_text_fields_reads_like_jsonl(tmp_path) -> None:
    pd.DataFrame([APPS_STDIN, APPS_CALL]).to_parquet(tmp_path / "apps.parquet")
    stdin, call = load_code_problems(tmp_path / "apps.parquet")
    assert stdin.hidden == (StdinCase("1 2\n", "3\n"), StdinCase("5 5\n", "10\n"))
    assert call.hidden == (CallCase("1, 2", "2"), CallCase("[3], [1]", "[3]"))


def test_apps_decoded_fields_lines_lists_and_integer_dict_keys(tmp_path) -> None:
    decoded = {
        "problem_id": 0,
        "question": "Sum n numbers.",
        "solutions": [],
        "input_output": {"inputs": [["2", "4 5"]], "outputs": [["9"]]},
        "starter_code": None,
    }
    keyed = {
        **APPS_CALL,
        "problem_id": 9,
        "input_output": {
            "fn_name": "group",
            "inputs": [[{"1": "a", "20": "b"}, {"1": 2, "x": 3}]],
            "outputs": [[{"-3": [True, None]}]],
        },
    }
    zero, dicts = load_code_problems(write_jsonl(tmp_path / "apps.jsonl", [decoded, keyed]))
    # problem_id 0 is an id; a test given as a list of lines is those lines joined
    assert zero.uid == "apps/0" and zero.reference is None and zero.starter == ""
    assert zero.hidden == (StdinCase("2\n4 5", "9"),)
    # JSON made integer keys text, and APPS's judge turns them back; a dict with other keys stays as it is
    assert dicts.hidden == (CallCase("{1: 'a', 20: 'b'}, {'1': 2, 'x': 3}", "{-3: [True, None]}"),)


def test_code_contests_rows_split_public_from_hidden_and_keep_python3_programs(tmp_path) -> None:
    frame = pd.DataFrame([CONTEST])
    frame.to_parquet(tmp_path / "cc.parquet")
    [problem] = load_code_problems(tmp_path / "cc.parquet", "code_contests")
    assert problem.visible == (StdinCase("1 1\n", "2\n"),)
    assert problem.hidden == (StdinCase("2 3\n", "5\n"), StdinCase("0 0\n", "0\n"))
    assert problem.reference == "print(sum(map(int, input().split())))" and problem.wrong == ("print(0)",)


def test_a_code_contests_reference_passes_its_hidden_cases_in_the_judge(tmp_path) -> None:
    [problem] = load_code_problems(write_jsonl(tmp_path / "cc.jsonl", [CONTEST]))
    results = judge(Program.for_problem(problem, problem.reference), problem.hidden)
    assert len(results) == 2 and all(r.passed for r in results)


def test_code_contests_json_text_fields_and_public_cases_standing_in_for_hidden(tmp_path) -> None:
    row = {
        **CONTEST,
        "public_tests": json.dumps({"input": ["3\n", "4\n"], "output": ["9", "16"]}),
        "private_tests": None,
        "generated_tests": json.dumps({"input": [], "output": []}),
        "solutions": json.dumps({"language": [1, 4], "solution": ["print 9", "class Main {}"]}),
        "incorrect_solutions": {"language": [3, 3, 3, 3], "solution": ["a", "b", "c", "d"]},
    }
    [problem] = load_code_problems(write_jsonl(tmp_path / "cc.jsonl", [row]))  # auto: description, public_tests
    assert problem.uid == "code_contests/1000_A. Sum"
    assert problem.visible == problem.hidden == (StdinCase("3\n", "9"), StdinCase("4\n", "16"))
    assert problem.reference is None and problem.wrong == ("a", "b", "c")


def test_livecodebench_private_cases_may_be_json_or_compressed(tmp_path) -> None:
    cases = [{"input": "[3, 2, 4]\n6", "output": "[1, 2]", "testtype": "functional"}]
    for private in (json.dumps(cases), packed(cases)):
        [problem] = load_code_problems(write_jsonl(tmp_path / "lcb.jsonl", [lcb_row(private)]))
        assert problem.style == "function" and problem.fn_name == "twoSum"
        assert problem.visible == (CallCase("[2, 7, 11], 9", "[0, 1]"),)
        assert problem.hidden == (CallCase("[3, 2, 4], 6", "[1, 2]"),)
    pd.DataFrame([lcb_row(packed(cases))]).to_parquet(tmp_path / "lcb.parquet")
    [problem] = load_code_problems(tmp_path / "lcb.parquet")
    assert problem.hidden == (CallCase("[3, 2, 4], 6", "[1, 2]"),)
    literals = lcb_row(json.dumps([{"input": '"a"\nnull', "output": "true", "testtype": "functional"}]))
    [problem] = load_code_problems(write_jsonl(tmp_path / "lcb1.jsonl", [literals]))
    assert problem.hidden == (CallCase("'a', None", "True"),)
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


def functional(output: str, testtype: str = "functional") -> str:
    return json.dumps([{"input": "[1]\n2", "output": output, "testtype": testtype}])


@pytest.mark.parametrize(
    "good, row, message",
    [
        (APPS_STDIN, {**APPS_STDIN, "input_output": "{oops"}, r"row 1 \(apps\): input_output is not valid JSON"),
        (APPS_STDIN, {**APPS_STDIN, "input_output": ""}, r"row 1 \(apps\): input_output is empty"),
        (APPS_STDIN, {**APPS_STDIN, "input_output": "[1]"}, "row 1 .*input_output must be an object"),
        (APPS_STDIN, {**APPS_STDIN, "input_output": json.dumps({"inputs": ["1"], "outputs": []})}, "one length"),
        (APPS_STDIN, {k: v for k, v in APPS_STDIN.items() if k != "question"}, "row 1 .*missing key 'question'"),
        (APPS_STDIN, {**APPS_STDIN, "question": "  "}, "row 1 .*question must be non-empty text"),
        (APPS_STDIN, {**APPS_STDIN, "input_output": json.dumps({"inputs": [], "outputs": []})}, "no hidden test case"),
        (APPS_STDIN, {**APPS_STDIN, "input_output": {"inputs": [1], "outputs": ["1"]}}, "must be text, got int"),
        (APPS_CALL, {**APPS_CALL, "input_output": {"fn_name": "f", "inputs": [5], "outputs": [1]}}, "argument list"),
        (
            APPS_CALL,
            {**APPS_CALL, "input_output": {"fn_name": "f", "inputs": [[1]], "outputs": [[float("inf")]]}},
            r"row 1 .*not a Python literal: 'inf'",
        ),  # fmt: skip
        (CONTEST, {**CONTEST, "public_tests": [["1"], ["2"]]}, "row 1 .*public_tests must be an object"),
        (CONTEST, {k: v for k, v in CONTEST.items() if k != "public_tests"}, "row 1 .*missing key 'public_tests'"),
        (CONTEST, {**CONTEST, "private_tests": {"input": ["1"], "output": "2"}}, "private_tests: needs lists"),
        (CONTEST, {**CONTEST, "solutions": {"language": [3], "solution": []}}, "solutions: needs lists"),
        (
            CONTEST,
            {**CONTEST, "public_tests": {"input": [], "output": []}, "private_tests": None, "generated_tests": None},
            r"row 1 \(code_contests\): .*no hidden test case",
        ),
        (lcb_row(""), lcb_row(functional("[1]", "interactive")), "testtype must be 'stdin' or 'functional'"),
        (lcb_row(""), {**lcb_row(functional("[1]")), "metadata": "{}"}, "need metadata.func_name"),
        (
            lcb_row(""),
            lcb_row(functional("[0, 1")),
            r"row 1 \(livecodebench\): private_test_cases: a functional output is not valid JSON",
        ),
        (lcb_row(""), lcb_row(functional("NaN")), "not a Python literal: 'nan'"),
        (lcb_row(""), lcb_row("not json, not base64!"), "neither JSON nor base64"),
        (lcb_row(""), lcb_row(packed([], encode=lambda v: v)), "the pickle holds list"),
        (lcb_row(""), lcb_row(base64.b64encode(zlib.compress(pickle.dumps("[]")[:-2])).decode()), "readable pickle"),
        (lcb_row(""), {**lcb_row(""), "public_test_cases": "[]"}, r"row 1 \(livecodebench\): .*no hidden test case"),
    ],
)
def test_malformed_rows_name_the_file_and_the_row(tmp_path, good, row, message) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", [good, row])
    load_code_problems(write_jsonl(tmp_path / "good.jsonl", [good]))  # the good row alone loads
    with pytest.raises(ValueError, match=message) as raised:
        load_code_problems(path)
    assert str(raised.value).startswith(f"{path}: row 1")


def test_unknown_forms_and_rows_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown code data form"):
        load_code_problems(write_jsonl(tmp_path / "a.jsonl", [APPS_STDIN]), "leetcode")
    with pytest.raises(ValueError, match="row 0: not a known code data form"):
        load_code_problems(write_jsonl(tmp_path / "b.jsonl", [{"prompt": "x"}]))
    bad_cases = {**CONTEST, "private_tests": {"input": ["1"], "output": []}}
    with pytest.raises(ValueError, match="private_tests: needs lists of inputs and outputs of one length"):
        load_code_problems(write_jsonl(tmp_path / "c.jsonl", [bad_cases]))
    with pytest.raises(ValueError, match="d.jsonl: no rows"):
        load_code_problems(write_jsonl(tmp_path / "d.jsonl", []))


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
    for problem in problems:
        assert problem.reference.startswith(problem.prelude) and problem.starter == problem.statement == problem.prelude
        ast.parse(problem.prelude)  # the program is appended after it
        for case in problem.hidden:
            if isinstance(case, CallCase):
                call_arguments(case.args), literal_value(case.expected)
            else:
                last = ast.parse(case.code).body[-1]
                assert any(isinstance(node, ast.Name) for node in ast.walk(last)), (problem.uid, case.code)


def test_hand_checked_humaneval_problems() -> None:
    problems = {p.uid: p for p in humaneval_problems()}
    metadata = "METADATA = {'author': 'jt', 'dataset': 'test'}\n"
    assert problems["HumanEval/2"].hidden == (
        CallCase("3.5", "0.5"),
        ScriptCase(metadata + "assert abs(candidate(1.33) - 0.33) < 1e-06"),
        ScriptCase(metadata + "assert abs(candidate(123.456) - 0.456) < 1e-06"),
    )
    # `assert True, "..."` tests nothing and is no case
    assert problems["HumanEval/160"].hidden == (
        CallCase("['**', '*', '+'], [2, 3, 4, 5]", "37"),
        CallCase("['+', '*', '-'], [2, 3, 4, 5]", "9"),
        CallCase("['//', '*'], [7, 3, 4]", "8"),
    )
    # 13 asserts: `candidate(11) == True` twice, and arguments such as `5 * 17` are no literal
    primes = problems["HumanEval/31"].hidden
    assert len(primes) == 12 and primes[2] == CallCase("11", "True") and primes.count(CallCase("11", "True")) == 1
    assert primes[9] == ScriptCase("METADATA = {}\nassert candidate(5 * 17) == False")
    [roots] = problems["HumanEval/32"].hidden
    assert roots.code.startswith("METADATA = {}\nimport math\nimport random\nrng = random.Random(42)\nimport copy\n")
    assert roots.code.endswith("assert math.fabs(poly(coeffs, solution)) < 0.0001")


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
    # `is 1` is no singleton check (though `1 in (True, False, None)`); a constant assert is dropped
    odd = humaneval_cases("def check(candidate):\n    assert candidate(1) is 1\n    assert True, 'x'\n")
    assert odd == (ScriptCase("assert candidate(1) is 1"),)
    with pytest.raises(ValueError, match="defines check once"):
        humaneval_cases("def test(candidate):\n    assert candidate(1)\n")


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
