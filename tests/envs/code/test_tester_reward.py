"""The tester's reward rules, computed by hand: catch_share (the default) against credit_share (the earlier rule)."""

from __future__ import annotations

import itertools

import pytest

from verl_mas_envs.code import tester_reward as rules
from verl_mas_envs.code.cases import CallCase, CodeProblem, StdinCase
from verl_mas_envs.code.env import CodeEnv

ADDER = "a, b = map(int, input().split())\nprint(a + b)\n"
SUBTRACTER = "a, b = map(int, input().split())\nprint(a - b)\n"
MULTIPLIER = "a, b = map(int, input().split())\nprint(a * b)\n"
ABS_ADDER = "a, b = map(int, input().split())\nprint(abs(a) + b)\n"
HIDDEN = (StdinCase("123 456\n", "579\n"), StdinCase("-5 5\n", "0\n"), StdinCase("7 8\n", "15\n"))
# Three known-wrong programs. What each prints, against the reference's a + b:
#   "2 2":  SUB 0, MUL 4, ABS 4    -> catches SUB only (1 of 3)
#   "-1 0": SUB -1, MUL 0, ABS 1   -> catches MUL and ABS (2 of 3)
#   "2 3":  SUB -1, MUL 6, ABS 5   -> catches SUB and MUL (2 of 3)
#   "-2 5": SUB -7, MUL -10, ABS 7 -> catches all 3
ADD = CodeProblem(
    "add/t", "Add.", "stdin", HIDDEN, visible=(StdinCase("1 2\n", "3\n"),), reference=ADDER,
    wrong=(SUBTRACTER, MULTIPLIER, ABS_ADDER),
)  # fmt: skip


def cases(*pairs: tuple[str, str]) -> str:
    return "\n".join(f"```input\n{i}\n```\n```output\n{o}\n```" for i, o in pairs)


def reward(reply: str, problem: CodeProblem = ADD, **options) -> float:
    env = CodeEnv(wrong_programs=0, **options)
    env.load(problem)
    return env.step("tester", reply).local_reward


def both_rules(reply: str, problem: CodeProblem = ADD) -> tuple[float, float]:
    return reward(reply, problem), reward(reply, problem, tester_reward="credit_share")


def test_the_default_rule_is_catch_share() -> None:
    assert CodeEnv().config.tester_reward == "catch_share" and CodeEnv().config.tester_case_penalty == 1.0


def test_one_case_catching_one_of_three_wrong_programs_earns_a_third_a_suite_catching_all_earns_one() -> None:
    assert both_rules(cases(("2 2", "4"))) == pytest.approx((1 / 3, 1.0))
    assert both_rules(cases(("2 2", "4"), ("-1 0", "-1"))) == pytest.approx((1.0, 1.0))  # SUB + (MUL, ABS)
    assert both_rules(cases(("2 3", "5"), ("-1 0", "-1"))) == pytest.approx((1.0, 1.0))  # overlapping catches
    assert both_rules(cases(("-2 5", "3"))) == pytest.approx((1.0, 1.0))


def test_a_case_the_correct_program_fails_costs_the_penalty_each() -> None:
    # a valid case catching all three, with a wrong expectation ("2 2" gives 4): 1 - 1; the earlier rule: 1 of 2
    assert both_rules(cases(("-2 5", "3"), ("2 2", "5"))) == pytest.approx((0.0, 0.5))
    assert reward(cases(("-2 5", "3"), ("2 2", "5")), tester_case_penalty=0.25) == pytest.approx(0.75)
    assert reward(cases(("2 2", "4"), ("2 2", "5"), ("3 3", "7")), tester_case_penalty=0.0) == pytest.approx(1 / 3)
    # wrong cases only: -1 each, floored at -0.25 (above an unreadable reply's -0.5); the earlier rule: 0
    assert both_rules(cases(("2 2", "5"))) == pytest.approx((-0.25, 0.0))
    assert both_rules(cases(("2 2", "5"), ("1 1", "3"))) == pytest.approx((-0.25, 0.0))
    assert reward(cases(("2 2", "5"), ("1 1", "3")), tester_case_penalty=0.1) == pytest.approx(-0.2)
    assert reward(cases(("-2 5", "3"), ("2 2", "5"), ("1 1", "3"))) == pytest.approx(-0.25)  # 1 - 2, floored


def test_one_input_with_several_outputs_never_earns_more_than_committing_to_one() -> None:
    # the first "2 3" is the case; the repeat with another output is a case the reference fails: 2/3 - 1, floored
    assert both_rules(cases(("2 3", "5"), ("2 3", "6"))) == pytest.approx((-0.25, 0.5))
    assert reward(cases(("2 3", "5"), ("2 3", "6")), tester_case_penalty=0.5) == pytest.approx(2 / 3 - 0.5)
    assert both_rules(cases(("2 3", "6"), ("2 3", "5"))) == pytest.approx((-0.25, 0.0))  # the wrong one came first
    assert both_rules(cases(("2 3", "5"), ("2  3", "5"))) == pytest.approx((2 / 3, 0.5))  # a plain repeat: no gain
    outputs = ("5", "6", "-1")
    committed = {output: reward(cases(("2 3", output))) for output in outputs}
    assert committed == pytest.approx({"5": 2 / 3, "6": -0.25, "-1": -0.25})
    for penalty in (1.0, 0.2):
        committed = {output: reward(cases(("2 3", output)), tester_case_penalty=penalty) for output in outputs}
        for count in (2, 3):
            for hedge in itertools.permutations(outputs, count):
                hedged = reward(cases(*(("2 3", output) for output in hedge)), tester_case_penalty=penalty)
                assert hedged <= max(committed[o] for o in hedge)


def test_degenerate_cases_earn_nothing_and_cost_nothing_under_catch_share() -> None:
    dangling = "\n```output\n1\n```\n```input\n9 9\n```"  # an output with no input, an input with no output
    assert both_rules(cases(("-2 5", "3")) + dangling) == pytest.approx((1.0, 1 / 3))
    empty = "```input\n\n```\n```output\n\n```"
    for reply in (dangling, empty, empty + dangling):  # no usable case: an invalid move under either rule
        assert both_rules(reply) == (-0.5, -0.5)
    function = CodeProblem(
        "fn/t", "Write add(a, b).", "function", (CallCase("1, 2", "3"),), fn_name="add",
        reference="def add(a, b):\n    return a + b\n", wrong=("def add(a, b):\n    return a - b\n",),
    )  # fmt: skip
    reply = "```python\nassert add(x, 1) == 2\nassert add(2, 3) == 5\nassert add(2, 3) == 6\nassert 9 == add(4, 5)\n```"
    # the non-literal x: degenerate; (2, 3) caught (a - b gives -1), then its repeat, which the reference fails
    # (degenerate, and a penalty under catch_share); (4, 5) caught too: 1 - 1, and 2 credited of 4
    assert both_rules(reply, function) == pytest.approx((1.0 - 1.0, 2 / 4))


def test_without_a_known_wrong_program_valid_cases_earn_nothing_and_wrong_ones_still_cost() -> None:
    alone = CodeProblem("add/n", "Add.", "stdin", HIDDEN, reference=ADDER)
    env = CodeEnv(wrong_programs=0)
    env.load(alone)
    result = env.step("tester", cases(("-2 5", "3"), ("2 2", "5")))
    assert result.local_reward == -0.25
    assert result.info == {
        "cases": 2, "degenerate": 0, "credited": 0, "caught": 0, "known_wrong": 0, "failed_by_correct": 1,
    }  # fmt: skip
    assert both_rules(cases(("-2 5", "3")), alone) == (0.0, 0.0)


def test_without_a_correct_program_nothing_is_checked_and_the_reward_is_zero() -> None:
    no_reference = CodeProblem("add/r", "Add.", "stdin", HIDDEN, wrong=(SUBTRACTER,))
    assert both_rules(cases(("-2 5", "3")), no_reference) == (0.0, 0.0)
    assert both_rules(cases(("2 2", "5")), no_reference) == (0.0, 0.0)  # a wrong case cannot be told from a right one


def test_the_coders_failing_programs_join_the_known_wrong_ones() -> None:
    problem = CodeProblem("add/c", "Add.", "stdin", HIDDEN, reference=ADDER, wrong=(SUBTRACTER,))
    env = CodeEnv(wrong_programs=0, max_turns=3)
    env.load(problem)
    env.step("coder", f"```python\n{MULTIPLIER}```")  # fails hidden cases: known-wrong from now on
    env.step("tester", cases(("1 1", "2")))
    catches_sub_only = env.step("tester", cases(("2 2", "4")))  # SUB prints 0, MUL 4
    assert catches_sub_only.local_reward == pytest.approx(1 / 2) and catches_sub_only.info["known_wrong"] == 2


def test_the_coders_passing_program_judges_the_cases_when_the_task_has_no_reference() -> None:
    env = CodeEnv(wrong_programs=0, max_turns=3)
    env.load(CodeProblem("add/p", "Add.", "stdin", HIDDEN))
    env.step("coder", f"```python\n{SUBTRACTER}```")
    env.step("tester", cases(("1 1", "3")))
    env.step("coder", f"```python\n{ADDER}```")  # passes every hidden case: the correct program from now on
    twin = env.clone()
    assert env.step("tester", cases(("2 3", "5"), ("3 3", "0"))).local_reward == pytest.approx(1.0 - 1.0)
    assert twin.step("tester", cases(("2 3", "5"))).local_reward == pytest.approx(1.0)


def test_the_reward_of_verdicts_by_hand() -> None:
    # 2 new cases (the first valid, catching programs 0 and 2; the second failed by the correct program), 1 repeat
    # that the correct program fails; 4 known-wrong programs
    verdicts = rules.Verdicts(2, (True, False, False), (frozenset({0, 2}), frozenset({1}), frozenset()), 4)
    assert (verdicts.credited, verdicts.caught_programs, verdicts.failed_by_correct) == (1, 2, 2)
    assert rules.tester_reward("catch_share", verdicts, degenerate=1, penalty=0.1) == pytest.approx(2 / 4 - 0.2)
    assert rules.tester_reward("catch_share", verdicts, degenerate=1, penalty=1.0) == -0.25
    assert rules.tester_reward("credit_share", verdicts, degenerate=1, penalty=1.0) == pytest.approx(1 / 3)


def test_brief_examples_show_the_statements_examples_in_brief_prompts() -> None:
    env = CodeEnv(wrong_programs=0, brief_prompts=True, brief_examples=True)
    env.load(ADD)
    plain = CodeEnv(wrong_programs=0, brief_prompts=True)
    plain.load(ADD)
    for role in ("coder", "tester"):
        assert env.observe(role)[1]["content"] == "Add.\n1 2 -> 3"
        assert plain.observe(role)[1]["content"] == "Add."
