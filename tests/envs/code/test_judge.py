"""The code judge: one sandbox run per program, every case in its own child, verdicts reached outside the sandbox."""

from __future__ import annotations

import pytest

from verl_mas_envs.code import judge as code_judge
from verl_mas_envs.code.cases import (
    CallCase,
    CodeProblem,
    ScriptCase,
    StdinCase,
    call_arguments,
    literal_value,
    stdout_matches,
    values_equal,
)
from verl_mas_envs.code.judge import JudgeLimits, Program, judge, judge_each, judge_together, pass_rate

ADD_CASES = (StdinCase("1 2\n", "3\n"), StdinCase("10 -4\n", "6\n"), StdinCase("0 0\n", "0\n"))
ADDER = Program("a, b = map(int, input().split())\nprint(a + b)\n", "stdin")
FAST = JudgeLimits(case_time_s=1.0, budget_s=4.0)


def statuses(results) -> list[str]:
    return [r.status for r in results]


# --- comparison ----------------------------------------------------------------------------------------------------


def test_stdout_compares_tokens_and_decimals_within_tolerance() -> None:
    assert stdout_matches("3\n", "3")
    assert stdout_matches("1 2\n3", "1\n2 3\n\n")
    assert not stdout_matches("3", "3 3")
    assert not stdout_matches("12", "12.0")  # an integer answer must be printed as one
    assert stdout_matches("0.3333333", "0.33333334")
    assert not stdout_matches("0.5", "0.51")
    assert not stdout_matches("0.5", "nan") and not stdout_matches("inf", "inf0")


def test_values_compare_as_python_does_with_float_tolerance() -> None:
    assert values_equal(0.3, 0.1 + 0.2)
    assert values_equal([1, (2, 3.0)], [1, (2, 3)])
    assert values_equal([1, 2], (1, 2)) and not values_equal([1, 2], (1, 2, 3))  # JSON answers have no tuples
    assert not values_equal([1], {1}) and not values_equal("ab", ["a", "b"])
    assert values_equal(True, 1)
    assert not values_equal({"a": 1}, {"a": 1, "b": 2})
    assert values_equal(float("nan"), float("nan"))
    assert not values_equal("1", 1)


@pytest.mark.parametrize(
    "source",
    ["__import__('os').system('true')", "*[1]", "**{'a': 1}", "f(1)", "1)", "x", "[1] + [2]", "1, k=open"],
)
def test_call_arguments_refuse_everything_but_literals(source: str) -> None:
    with pytest.raises(ValueError):
        call_arguments(source)


def test_call_arguments_read_positional_and_keyword_literals() -> None:
    assert call_arguments("[1, 2], -3, k={'x': (1,)}") == ([[1, 2], -3], {"k": {"x": (1,)}})
    assert literal_value(" {1, 2} ") == {1, 2}
    with pytest.raises(ValueError, match="not a Python literal"):
        literal_value("1 +")


def test_a_problem_refuses_cases_of_the_wrong_kind_and_missing_parts() -> None:
    with pytest.raises(ValueError, match="no hidden test case"):
        CodeProblem("p", "add", "stdin", ())
    with pytest.raises(ValueError, match="cannot have a CallCase"):
        CodeProblem("p", "add", "stdin", (CallCase("1", "1"),))
    with pytest.raises(ValueError, match="needs fn_name"):
        CodeProblem("p", "add", "function", (CallCase("1", "1"),))


# --- running ---------------------------------------------------------------------------------------------------------


def test_a_stdin_program_is_judged_on_each_case() -> None:
    wrong_once = Program("a, b = map(int, input().split())\nprint(a + b if a else 7)\n", "stdin")
    assert statuses(judge(ADDER, ADD_CASES, FAST)) == ["passed"] * 3
    results = judge(wrong_once, ADD_CASES, FAST)
    assert statuses(results) == ["passed", "passed", "wrong"]
    assert results[2].actual == "7\n" and pass_rate(results) == pytest.approx(2 / 3)


def test_all_cases_of_a_program_take_one_sandbox_run(monkeypatch) -> None:
    calls = []
    real = code_judge.run_python
    monkeypatch.setattr(code_judge, "run_python", lambda *a, **k: calls.append(a) or real(*a, **k))
    judge(ADDER, ADD_CASES * 4, FAST)
    assert len(calls) == 1


def test_function_cases_return_values_and_class_solutions_are_found() -> None:
    add = Program("def add(a, b):\n    return a + b\n", "function", "add")
    cases = (
        CallCase("1, 2", "3"),
        CallCase("0.1, 0.2", "0.3"),
        CallCase("[1], [2]", "[1, 2]"),
        CallCase("1, b=1", "3"),
    )
    assert statuses(judge(add, cases, FAST)) == ["passed", "passed", "passed", "wrong"]
    leetcode = Program("class Solution:\n    def twoSum(self, xs, t):\n        return [0, 1]\n", "function", "twoSum")
    assert statuses(judge(leetcode, (CallCase("[2, 7], 9", "[0, 1]"),), FAST)) == ["passed"]
    missing = Program("def other():\n    pass\n", "function", "add")
    assert statuses(judge(missing, cases[:1], FAST)) == ["no_function"]


def test_script_cases_pass_when_they_raise_nothing() -> None:
    add = Program("def add(a, b):\n    return a + b\n", "function", "add")
    cases = (
        ScriptCase("assert candidate(2, 3) == 5"),
        ScriptCase("import math\nassert math.isclose(candidate(1, 1), 3)"),
    )
    assert statuses(judge(add, cases, FAST)) == ["passed", "error"]


def test_the_prelude_runs_before_the_program() -> None:
    helper_user = Program(
        "def double_add(a, b):\n    return twice(a) + b\n",
        "function",
        "double_add",
        "def twice(x):\n    return 2 * x\n",
    )
    assert statuses(judge(helper_user, (CallCase("3, 1", "7"),), FAST)) == ["passed"]


def test_a_program_that_does_not_compile_fails_every_case_as_such() -> None:
    results = judge(Program("def f(:\n", "stdin"), ADD_CASES, FAST)
    assert statuses(results) == ["syntax_error"] * 3 and "SyntaxError" in results[0].actual


def test_errors_exit_codes_and_timeouts_are_per_case() -> None:
    program = Program(
        "import sys\nn = int(input())\nif n == 1:\n    raise KeyError('boom')\nif n == 2:\n    sys.exit(3)\n"
        "if n == 3:\n    while True:\n        pass\nprint(n)\n",
        "stdin",
    )
    cases = tuple(StdinCase(f"{n}\n", f"{n}\n") for n in (1, 2, 3, 4))
    results = judge(program, cases, JudgeLimits(case_time_s=0.5, budget_s=5.0))
    assert statuses(results) == ["error", "error", "timeout", "passed"]
    assert "KeyError" in results[0].actual


def test_cases_after_the_budget_are_not_run() -> None:
    slow = Program("import time\ntime.sleep(0.6)\nprint(input())\n", "stdin")
    # 6 cases of 0.6 s in a 2 s budget: the last ones start after it is spent; the 1.4 s over the first case's sleep
    # leaves room for a loaded machine (at a 1 s limit the first case timed out once in a clean-clone CI run)
    cases = tuple(StdinCase(f"{n}\n", f"{n}\n") for n in range(6))
    results = judge(slow, cases, JudgeLimits(case_time_s=2.0, budget_s=2.0))
    assert statuses(results)[0] == "passed" and statuses(results)[-1] == "not_run"


def test_large_input_and_output_limit() -> None:
    echo_count = Program("import sys\nprint(len(sys.stdin.read().split()))\n", "stdin")
    big = StdinCase("7 " * 200_000, "200000")
    assert statuses(judge(echo_count, (big,), FAST)) == ["passed"]
    flood = Program("while True:\n    print('x' * 1000)\n", "stdin")
    assert statuses(judge(flood, ADD_CASES[:1], FAST)) == ["output_limit"]


def test_a_function_may_print_freely_and_programs_may_call_exit() -> None:
    chatty = Program("def add(a, b):\n    print('x' * 100_000)\n    return a + b\n", "function", "add")
    assert statuses(judge(chatty, (CallCase("1, 2", "3"),), FAST)) == ["passed"]
    exits = Program("print(int(input()) * 2)\nexit()\nprint('never')\n", "stdin")
    quits = Program("print(int(input()) * 2)\nquit(0)\n", "stdin")
    for program in (exits, quits):
        assert statuses(judge(program, (StdinCase("4\n", "8\n"),), FAST)) == ["passed"]


def test_each_case_starts_from_a_fresh_program_state() -> None:
    counter = Program(
        "import builtins\nbuiltins.seen = getattr(builtins, 'seen', 0) + 1\nprint(builtins.seen)\n", "stdin"
    )
    cases = tuple(StdinCase("", "1") for _ in range(3))
    assert statuses(judge(counter, cases, FAST)) == ["passed"] * 3


def test_judge_each_runs_programs_separately() -> None:
    results = judge_each([ADDER, Program("print(0)", "stdin")], ADD_CASES, FAST)
    assert [statuses(r) for r in results] == [["passed"] * 3, ["wrong", "wrong", "passed"]]


def test_trusted_programs_judged_together_take_one_run_and_keep_their_own_verdicts(monkeypatch) -> None:
    calls = []
    real = code_judge.run_python
    monkeypatch.setattr(code_judge, "run_python", lambda *a, **k: calls.append(a) or real(*a, **k))
    sleeper = Program("import time\ntime.sleep(5)\n", "stdin")
    others = [ADDER, Program("print(0)", "stdin"), Program("def f(:\n", "stdin"), Program("print(1 / 0)", "stdin")]
    limits = JudgeLimits(case_time_s=2.0, budget_s=2.0)
    together = judge_together([sleeper, *others], ADD_CASES, limits)
    assert len(calls) == 1
    # the sleeper spends its whole budget; each program after it has a budget of its own
    assert set(statuses(together[0])) <= {"timeout", "not_run"}
    assert together[1:] == [judge(program, ADD_CASES, limits) for program in others]
    assert [statuses(r) for r in together[1:]] == [
        ["passed"] * 3,
        ["wrong", "wrong", "passed"],
        ["syntax_error"] * 3,
        ["error"] * 3,
    ]


def test_judging_together_refuses_programs_of_different_problems_and_handles_empty_input() -> None:
    with pytest.raises(ValueError, match="style, fn_name and prelude"):
        judge_together([ADDER, Program("def add(a, b):\n    return a + b\n", "function", "add")], ADD_CASES)
    assert judge_together([], ADD_CASES) == []
    assert judge_together([ADDER, ADDER], ()) == [(), ()]


def test_a_program_that_kills_a_shared_run_loses_only_its_own_verdicts(monkeypatch) -> None:
    """The shared run dies with every verdict in it (why model-written programs never share one); judged again one
    program a run, the others keep theirs."""
    calls = []
    real = code_judge.run_python
    monkeypatch.setattr(code_judge, "run_python", lambda *a, **k: calls.append(a) or real(*a, **k))
    killer = Program("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", "stdin")
    results = judge_together([ADDER, killer], ADD_CASES, FAST)
    assert [statuses(r) for r in results] == [["passed"] * 3, ["crash"] * 3]
    assert len(calls) == 1 + 2


def test_a_file_one_case_or_program_writes_is_not_the_next_one_s_input() -> None:
    """Each case runs in a working directory of its own, also when programs share a run."""
    writer = Program("open('left.txt', 'w').write('7')\nprint(input())", "stdin")
    reader = Program("import os\ninput()\nprint(os.path.exists('left.txt'))", "stdin")
    fresh = tuple(StdinCase(f"{n}\n", "False\n") for n in range(3))
    assert statuses(judge_together([writer, reader], fresh, FAST)[1]) == ["passed"] * 3
    writes_then_reads = Program(
        "import os\nprint(os.path.exists('left.txt'))\nopen('left.txt', 'w').write(input())", "stdin"
    )
    assert statuses(judge(writes_then_reads, fresh, FAST)) == ["passed"] * 3


# --- hostile programs ------------------------------------------------------------------------------------------------


def test_an_object_that_equals_everything_is_not_a_passing_result() -> None:
    always = "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
    cheat = Program(always + "def add(a, b):\n    return Yes()\n", "function", "add")
    sub_int = Program(
        "class I(int):\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return I(0)\n",
        "function",
        "add",
    )
    cases = (CallCase("1, 2", "3"), ScriptCase("assert candidate(1, 2) == 3"))
    for program in (cheat, sub_int):
        assert [r.passed for r in judge(program, cases, FAST)] == [False, False]


def test_patched_builtins_do_not_reach_the_dataset_asserts() -> None:
    patcher = Program("import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n    return x\n", "function", "f")
    assert statuses(judge(patcher, (ScriptCase("assert abs(candidate(5) - 9) < 1e-6"),), FAST)) == ["error"]


def test_expected_outputs_never_enter_the_sandbox() -> None:
    """A program that searches everything it can read for the expected output finds nothing.

    The secret is long and holds letters that no hex address, uid or pid can: with a six-digit number, the reprs of
    the interpreter's objects (thousands of `at 0x7f...` addresses) matched it by chance about once in hundreds of runs.
    """
    secret = "zq-vkw-jyx-905173-pqz"
    snoop = Program(
        "import os, sys, gc\nfound = []\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    if root.startswith(('/proc', '/dev', '/usr', '/sys', '/lib', '/bin', '/sbin', sys.base_prefix)):\n"
        "        dirs.clear()\n"
        "        continue\n"
        "    for name in files:\n"
        "        try:\n"
        "            found.append(open(os.path.join(root, name), errors='ignore').read(100000))\n"
        "        except Exception:\n"
        "            pass\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        found.append(open(f'/proc/{pid}/cmdline', errors='ignore').read())\n"
        "        found.append(open(f'/proc/{pid}/environ', errors='ignore').read())\n"
        "    except Exception:\n"
        "        pass\n"
        "found += [repr(o) for o in gc.get_objects() if isinstance(o, (str, dict, list))]\n"
        # the secret is joined only after the search, so the program's own text and memory do not hold it
        "secret = '-'.join(['zq', 'vkw', 'jyx', str(905000 + 173), 'pqz'])\n"
        "hits = [text[max(0, text.find(secret) - 60) : text.find(secret) + 60] for text in found if secret in text]\n"
        "print('LEAK ' + repr(hits[:3]) if hits else 'clean')\n",
        "stdin",
    )
    results = judge(snoop, (StdinCase("1\n", f"{secret}\n"),), JudgeLimits(case_time_s=20.0, budget_s=20.0))
    assert results[0].status == "wrong" and results[0].actual.strip() == "clean", results[0].actual


def test_printing_the_visible_examples_does_not_pass_hidden_cases() -> None:
    visible = (StdinCase("1 2\n", "3\n"),)
    hardcoded = Program("print(3)\n", "stdin")
    assert [r.passed for r in judge(hardcoded, visible + ADD_CASES[1:], FAST)] == [True, False, False]


def test_forks_and_daemons_die_with_their_case() -> None:
    """A case's child starts a setsid'd daemon that would print into the next case's output; it is killed first."""
    daemon = Program(
        "import os, time, sys\n"
        "n = input().strip()\n"
        "if n == 'spawn' and os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(0.3)\n"
        "    for fd in os.listdir('/proc/self/fd'):\n"
        "        pass\n"
        "    os.system('true')\n"
        "    print('INJECTED', flush=True)\n"
        "    os._exit(0)\n"
        "time.sleep(0.05)\n"
        "print(n)\n",
        "stdin",
    )
    cases = (StdinCase("spawn\n", "spawn\n"), StdinCase("wait\n", "wait\n"))
    slow_second = Program(
        daemon.source.replace("time.sleep(0.05)", "time.sleep(0.05 if n == 'spawn' else 0.6)"), "stdin"
    )
    results = judge(slow_second, cases, FAST)
    assert statuses(results) == ["passed", "passed"] and "INJECTED" not in results[1].actual


def test_a_fork_bomb_fails_its_own_cases_only() -> None:
    bomb = Program("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", "stdin")
    assert not any(r.passed for r in judge(bomb, ADD_CASES[:2], JudgeLimits(case_time_s=0.5, budget_s=2.0)))
    assert statuses(judge(ADDER, ADD_CASES, FAST)) == ["passed"] * 3


def test_a_program_that_kills_the_harness_loses_only_its_own_cases() -> None:
    killer = Program("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", "stdin")
    results = judge(killer, ADD_CASES, FAST)
    assert statuses(results) == ["crash"] * 3


def test_a_forged_results_line_cannot_pass_unknown_expected_outputs() -> None:
    """The program prints the harness's mark itself: the forged report is not the harness's last line, and even a
    forged report carries outputs, which are compared with expected outputs the program never saw."""
    from verl_mas_envs.code.harness import MARK

    forger = Program(
        "import os, json\n"
        f"line = {MARK!r} + json.dumps([{{'status': 'ok', 'output': 'x', 'error': ''}}] * 3) + '\\n'\n"
        "fd = os.open(f'/proc/{os.getppid()}/fd/1', os.O_WRONLY)\n"
        "os.write(fd, line.encode())\n",
        "stdin",
    )
    assert not any(r.passed for r in judge(forger, ADD_CASES, FAST))


# --- the judge could not run the program -----------------------------------------------------------------------------


def test_a_sandbox_that_cannot_start_is_the_judge_s_failure_not_the_program_s(monkeypatch) -> None:
    from sandbox_faults import fail_sandbox_starts

    fail_sandbox_starts(monkeypatch, every=True)
    results = judge(ADDER, ADD_CASES, FAST)
    assert statuses(results) == ["infra"] * 3
    assert "Resource temporarily unavailable" in code_judge.infra_failure(results)
    crashing = judge(Program("import os\nos._exit(1)\n", "stdin"), ADD_CASES, FAST)
    assert statuses(crashing) == ["infra"] * 3  # nothing ran: no verdict on it either
    monkeypatch.undo()
    assert statuses(judge(Program("import os\nos._exit(1)\n", "stdin"), ADD_CASES, FAST)) == ["error"] * 3
    assert code_judge.infra_failure(judge(ADDER, ADD_CASES, FAST)) is None


def test_a_harness_that_cannot_fork_a_case_reports_it_as_infra(monkeypatch) -> None:
    from verl_mas_envs.code import harness

    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(harness.os, "fork", no_fork)
    job = {"cases": [{"kind": "stdin", "input": "1 2\n"}], "output_bytes": 1000}
    report = harness.run_case(compile("print(1)", "program.py", "exec"), job, job["cases"][0], {}, 1.0)
    assert report["status"] == "infra" and "Resource temporarily unavailable" in report["error"]
