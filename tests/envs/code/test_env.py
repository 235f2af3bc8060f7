"""The code environment: hand-computed rewards of both roles, turns, prompts, sources and splits."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import math
import random
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl_mas import cli
from verl_mas.advantage import registered_estimator
from verl_mas.data_files import load_rows
from verl_mas.dataset import read_tasks
from verl_mas.env import Task, make_env
from verl_mas.rollout import Generation, GenerationRequest, RolloutConfig, rollout_tasks
from verl_mas.router import PolicyRouter
from verl_mas_envs.code import judge as code_judge
from verl_mas_envs.code import problems as code_problems
from verl_mas_envs.code.cases import CallCase, CodeProblem, StdinCase
from verl_mas_envs.code.env import CodeEnv
from verl_mas_envs.code.judge import Program, judge
from verl_mas_envs.code.tester_reply import read_tester_reply

ADDER = "a, b = map(int, input().split())\nprint(a + b)\n"
SUBTRACTER = "a, b = map(int, input().split())\nprint(a - b)\n"
ABS_ADDER = "a, b = map(int, input().split())\nprint(abs(a) + b)\n"  # wrong only when a < 0
HIDDEN = (
    StdinCase("123 456\n", "579\n"),
    StdinCase("-5 5\n", "0\n"),
    StdinCase("1000 2000\n", "3000\n"),
    StdinCase("7 8\n", "15\n"),
)
ADD = CodeProblem("add/0", "Read a and b; print a + b.", "stdin", HIDDEN, reference=ADDER, wrong=(SUBTRACTER,))


def python(source: str) -> str:
    return f"Here it is.\n```python\n{source}```"


def cases(*pairs: tuple[str, str]) -> str:
    return "\n".join(f"```input\n{i}\n```\n```output\n{o}\n```" for i, o in pairs)


def started(problem: CodeProblem = ADD, **options) -> CodeEnv:
    env = CodeEnv(wrong_programs=0, **options)
    env.load(problem)
    return env


def test_the_coder_earns_the_share_of_hidden_cases_its_program_passes() -> None:
    env = started()
    for program, share in ((ADDER, 1.0), (ABS_ADDER, 0.75), (SUBTRACTER, 0.0)):
        result = env.clone().step("coder", python(program))
        assert result.valid and result.local_reward == pytest.approx(share)
        assert result.team_reward == (1.0 if share == 1.0 else 0.0)


@pytest.mark.parametrize("reply", ["print(1)", "```python\ndef f(:\n```", ""])
def test_no_program_or_one_that_does_not_compile_is_an_invalid_move(reply: str) -> None:
    result = started().step("coder", reply)
    assert not result.valid and result.local_reward == -0.5 and "error" in result.info


def test_a_tester_case_earns_credit_when_the_reference_passes_it_and_a_wrong_program_fails_it() -> None:
    """The credit_share rule (tests/envs/code/test_tester_reward.py has the default catch_share's)."""
    # "2 3"/"5": reference 5, the wrong program -1: credit. "0 0"/"0": both print 0: not discriminating.
    # "2 2"/"5": the reference prints 4: a wrong expectation. A repeat (the reference passes it) and a dangling input:
    # degenerate.
    reply = cases(("2 3", "5"), ("0 0", "0"), ("2 2", "5"), ("2  3", "5")) + "\n```input\n9 9\n```"
    result = started(tester_reward="credit_share").step("tester", reply)
    expected_info = {"cases": 3, "degenerate": 2, "credited": 1, "caught": 1, "known_wrong": 1, "failed_by_correct": 1}
    assert result.valid and result.info == expected_info
    assert result.local_reward == pytest.approx(1 / 5)
    perfect = started(tester_reward="credit_share").step("tester", cases(("2 3", "5"), ("4 1", "5")))
    assert perfect.local_reward == pytest.approx(1.0)


def test_without_a_wrong_program_or_a_correct_one_no_case_earns_credit() -> None:
    no_wrong = CodeProblem("add/1", "Add.", "stdin", HIDDEN, reference=ADDER)
    assert started(no_wrong).step("tester", cases(("2 3", "5"))).local_reward == 0.0
    no_reference = CodeProblem("add/2", "Add.", "stdin", HIDDEN, wrong=(SUBTRACTER,))
    assert started(no_reference).step("tester", cases(("2 3", "5"))).local_reward == 0.0


def test_the_coders_programs_judge_the_testers_cases_when_the_task_has_no_reference() -> None:
    env = started(CodeProblem("add/3", "Add.", "stdin", HIDDEN), max_turns=3, tester_reward="credit_share")
    env.step("coder", python(SUBTRACTER))  # fails hidden cases: a known-wrong program from now on
    env.step("tester", cases(("1 1", "3")))  # a wrong case: the turn goes on
    env.step("coder", python(ADDER))  # passes every hidden case: a correct program from now on
    result = env.step("tester", cases(("2 3", "5"), ("3 3", "0")))
    assert result.info["credited"] == 1 and result.local_reward == pytest.approx(0.5)


def test_a_tester_reply_runs_once_on_the_trusted_programs_and_once_per_program_the_coder_wrote(monkeypatch) -> None:
    """The reference and the known-wrong programs share one sandbox run; a failing program the model wrote runs
    alone (it could kill the harness). Every verdict is the one each program earns judged alone."""
    env = CodeEnv(wrong_programs=2, max_turns=2)
    env.load(ADD)
    known_wrong = env._known_wrong()  # the mutant search runs here, before counting
    runs = []
    real = code_judge.run_python
    monkeypatch.setattr(code_judge, "run_python", lambda *a, **k: runs.append(1) or real(*a, **k))

    def caught(programs: tuple[str, ...], pairs: tuple[tuple[str, str], ...]) -> int:
        valid = [StdinCase(i + "\n", o + "\n") for i, o in pairs]
        valid = [c for c in valid if judge(Program(ADDER, "stdin"), (c,))[0].passed]
        return sum(not all(r.passed for r in judge(Program(p, "stdin"), valid)) for p in programs)

    def failed_by_correct(pairs: tuple[tuple[str, str], ...]) -> int:
        return sum(not judge(Program(ADDER, "stdin"), (StdinCase(i + "\n", o + "\n"),))[0].passed for i, o in pairs)

    first_cases = (("-5 5", "0"), ("2 3", "6"))
    first = env.step("tester", cases(*first_cases))  # before the coder's first program
    assert len(runs) == 1  # the reference and the known-wrong programs together
    assert first.info["known_wrong"] == len(known_wrong) and first.info["caught"] == caught(known_wrong, first_cases)
    assert first.info["failed_by_correct"] == failed_by_correct(first_cases) == 1
    env.step("coder", python(ABS_ADDER))  # fails a hidden case: the model's own known-wrong program from now on
    second_cases = (("-1 4", "3"), ("6 6", "12"))
    runs.clear()
    second = env.step("tester", cases(*second_cases))
    assert len(runs) == 2  # the trusted programs together, ABS_ADDER alone
    wrong = (*known_wrong, ABS_ADDER)
    assert second.info["known_wrong"] == len(wrong) and second.info["caught"] == caught(wrong, second_cases)
    assert second.info["failed_by_correct"] == failed_by_correct(second_cases) == 0


def test_without_a_reference_the_coder_s_passing_program_never_shares_a_run(monkeypatch) -> None:
    """The correct program is then the model's own: it and the task's wrong programs are judged one run each."""
    env = started(CodeProblem("add/5", "Add.", "stdin", HIDDEN, wrong=(SUBTRACTER,)), max_turns=3)
    env.step("coder", python(ADDER))  # passes every hidden case: the correct program from now on
    env.step("tester", cases(("1 1", "3")))  # a wrong case: the turn goes on
    runs = []
    real = code_judge.run_python
    monkeypatch.setattr(code_judge, "run_python", lambda *a, **k: runs.append(1) or real(*a, **k))
    result = env.step("tester", cases(("2 3", "5"), ("8 1", "9")))  # before the coder's move: no turn check
    assert len(runs) == 2 and result.info["caught"] == 1 and result.info["failed_by_correct"] == 0


def test_a_tester_reply_with_no_case_is_invalid() -> None:
    result = started().step("tester", "I would test with 1 2.")
    assert not result.valid and result.local_reward == -0.5


def test_a_turn_shows_both_roles_the_program_and_its_mismatches_then_ends_when_it_passes() -> None:
    env = started(max_turns=3)
    env.step("coder", python(ABS_ADDER))
    result = env.step("tester", cases(("-2 5", "3"), ("1 1", "2")))
    assert not result.done and env.state.turn == 1
    for role in ("coder", "tester"):
        prompt = env.observe(role)[1]["content"]
        assert "abs(a) + b" in prompt and "It passed 1 of the tester's 2 latest cases." in prompt
        assert "- input: -2 5\n  expected: 3\n  actual: 7" in prompt
    env.step("coder", python(ADDER))
    result = env.step("tester", "no new cases")  # invalid: the latest cases stay
    assert result.done and env.state.outcome == "passed" and env.success()


@pytest.mark.parametrize("brief", [False, True])
def test_cases_before_any_program_compiled_show_no_mismatch(brief: bool) -> None:
    """A turn whose coder wrote nothing runnable leaves cases with no results: the next prompts say so, no crash."""
    env = started(max_turns=3, brief_prompts=brief)
    env.step("coder", "no program yet")
    env.step("tester", cases(("2 3", "5")))
    prompts = [env.observe(role)[1]["content"] for role in ("coder", "tester")]
    assert all("want:" not in p and "expected:" not in p for p in prompts)
    assert brief or all("No program has compiled yet." in p for p in prompts)


def test_hidden_cases_never_reach_a_prompt() -> None:
    env = started(max_turns=3)
    seen = [m["content"] for role in ("coder", "tester") for m in env.observe(role)]
    for coder, tester in ((ABS_ADDER, cases(("-2 1", "-1"))), (SUBTRACTER, cases(("5 5", "10")))):
        env.step("coder", python(coder))
        env.step("tester", tester)
        seen += [m["content"] for role in ("coder", "tester") for m in env.observe(role)]
    text = "\n".join(seen)
    assert all(case.input.strip() not in text and f"expected: {case.expected.strip()}" not in text for case in HIDDEN)


def test_the_episode_ends_out_of_turns_and_success_is_the_latest_programs() -> None:
    env = started(max_turns=1)
    env.step("coder", python(ADDER))
    env.step("tester", cases(("1 1", "3")))  # wrong: the program "fails" it
    assert env.done and env.state.outcome == "out_of_turns" and env.success()


def test_the_single_agent_ends_at_its_first_program_that_compiles() -> None:
    env = started(single_agent=True, max_turns=3)
    assert env.roles == ("coder",)
    assert not env.step("coder", "no code").done
    result = env.step("coder", python(ABS_ADDER))
    assert result.done and not env.success() and result.local_reward == pytest.approx(0.75)


def test_function_tasks_read_assert_lines_of_literals() -> None:
    problem = CodeProblem(
        "fn/0",
        "Write add(a, b).",
        "function",
        (CallCase("1, 2", "3"),),
        fn_name="add",
        reference="def add(a, b):\n    return a + b\n",
    )
    reply = (
        "```python\nassert add(2, 3) == 5\nassert 9 == add(4, 5)\nassert add(2, 3) == 6\n"
        "assert add(x, 1) == 2\nassert not add(0, 0)\nprint('done')\n```"
    )
    parsed = read_tester_reply(reply, problem, limit=8)
    assert parsed.cases == (CallCase("2, 3", "5"), CallCase("4, 5", "9"), CallCase("0, 0", "False"))
    assert parsed.degenerate == 2  # the repeated arguments (2, 3) and the non-literal x
    assert len(read_tester_reply(reply, problem, limit=2).cases) == 2


def test_mutants_of_the_reference_serve_as_known_wrong_programs() -> None:
    env = CodeEnv(wrong_programs=3)
    env.load(CodeProblem("add/4", "Add.", "stdin", HIDDEN, reference=ADDER))
    wrong = env._known_wrong()
    assert 1 <= len(wrong) <= 3 and ADDER not in wrong
    for source in wrong:
        assert not all(r.passed for r in judge(Program(source, "stdin"), HIDDEN))
    assert env.step("tester", cases(("2 3", "5"))).local_reward == pytest.approx(1.0)


def test_a_mutant_that_is_one_of_the_task_s_wrong_programs_written_otherwise_is_not_counted_again() -> None:
    # ADDER's one mutant is '+' -> '-', SUBTRACTER; here the task gives it with other spacing and a comment
    given = "a, b = map(int, input().split())  # read\nprint(a-b)\n"
    assert ast.dump(ast.parse(given)) == ast.dump(ast.parse(SUBTRACTER))
    env = CodeEnv(wrong_programs=3)
    env.load(CodeProblem("add/6", "Add.", "stdin", HIDDEN, reference=ADDER, wrong=(given,)))
    assert env._known_wrong() == (given,)
    assert env.step("tester", cases(("2 3", "5"))).info["known_wrong"] == 1


def test_arithmetic_tasks_are_seeded_split_apart_and_solved_by_their_reference() -> None:
    def problem(seed: int, split: str) -> CodeProblem:
        return code_problems.task_problem("arithmetic", {"terms": 2}, seed, split)

    assert problem(5, "train") == problem(5, "train")
    train = {problem(seed, "train").uid for seed in range(30)}  # the expression: all a brief prompt shows
    evaluation = {problem(seed, "eval").uid for seed in range(30)}
    assert not train & evaluation and len(train) > 20
    sample = problem(1, "train")
    assert all(r.passed for r in judge(Program(sample.reference, "stdin"), sample.hidden))
    for wrong in sample.wrong:
        assert not all(r.passed for r in judge(Program(wrong, "stdin"), sample.hidden))


def test_arithmetic_hidden_results_are_computed_from_the_expression() -> None:
    found = code_problems.arithmetic_problem(random.Random(0), 1, 2)
    assert found is not None
    expression = found.uid.split("/", 2)[2]  # e.g. "b * 4"
    for case in found.hidden:
        a, b = map(int, case.input.split())
        left, op, right = expression.split()  # one operation: a variable, an operator, a variable or a digit
        x, y = {"a": a, "b": b}[left], {"a": a, "b": b}.get(right, int(right) if right.isdigit() else None)
        assert int(case.expected) == {"+": x + y, "-": x - y, "*": x * y}[op]


def test_codeio_tasks_have_hidden_cases_their_reference_passes() -> None:
    problem = code_problems.task_problem("codeio", {}, 0, "train")
    assert problem.style == "function" and problem.fn_name == "main_solution" and problem.hidden
    assert all(r.passed for r in judge(Program.for_problem(problem, problem.reference), problem.hidden))
    nothing = Program.for_problem(problem, "def main_solution(**kwargs):\n    return None\n")
    assert not all(r.passed for r in judge(nothing, problem.hidden))
    assert code_problems.task_problem("codeio", {}, 0, "train") == problem


@pytest.mark.parametrize(
    "options, message",
    [
        ({"source": "nope"}, "unknown code source"),
        ({"source_options": {"terms": 9}}, "terms must be an int in"),
        ({"source_options": {"colour": 1}}, "has no option 'colour'"),
        ({"max_tester_cases": 0}, "max_tester_cases must be an int >= 1"),
        ({"case_time_s": float("inf")}, "case_time_s must be a positive finite number"),
        ({"single_agent": "yes"}, "single_agent must be true or false"),
        ({"tester_reward": "catch"}, "tester_reward must be one of"),
        ({"tester_case_penalty": -0.5}, "tester_case_penalty must be a finite number >= 0"),
        ({"tester_case_penalty": "1"}, "tester_case_penalty must be a finite number >= 0"),
        ({"brief_examples": True}, "brief_examples .* needs brief_prompts=true"),
        ({"data_file": "/nonexistent/code.jsonl"}, "code data_file"),
    ],
)
def test_bad_options_fail_at_construction_naming_the_key(options, message) -> None:
    with pytest.raises(ValueError, match=message):
        CodeEnv(**options)


def test_the_registered_env_plays_a_task_from_its_seed() -> None:
    env = make_env("code", source_options={"terms": 1})
    env.reset(Task("t0", "code", 4, "eval"))
    first = env.observe("coder")
    twin = make_env("code", source_options={"terms": 1})
    twin.reset(Task("t1", "code", 4, "eval"))
    assert twin.observe("coder") == first
    assert env.step("coder", env.expert("coder")).local_reward == 1.0


def test_a_tree_rollout_gives_both_roles_groups_that_spread_and_ends_when_the_program_passes() -> None:
    """K = 4 candidates per role, scored against the same state; the best of each is replayed together."""
    replies = {
        "coder": [python(ADDER), python(ABS_ADDER), "no code", python(SUBTRACTER)],
        "tester": [cases(("2 3", "5")), cases(("0 0", "0")), "no cases", cases(("2 2", "5"))],
    }

    async def generate(request: GenerationRequest) -> list[Generation]:
        return [Generation(text, (1,), (2, 3)) for text in replies[request.role][: request.n]]

    def factory(task: Task) -> CodeEnv:
        return started()

    router = PolicyRouter.from_spec("shared", ("coder", "tester"))
    [episode] = asyncio.run(rollout_tasks([Task("t0", "code", 0)], generate, router, RolloutConfig(k=4), factory))
    by_role = {role: [s for s in episode.samples if s.role == role] for role in ("coder", "tester")}
    # mixed reward = team + local; team = the candidate's program (coder) or the state's (tester) passes hidden cases
    assert [s.reward for s in by_role["coder"]] == pytest.approx([2.0, 0.75, -0.5, 0.0])
    # catch_share: all of the one wrong program caught; none caught; no case; a case the reference fails (-1, floored)
    assert [s.reward for s in by_role["tester"]] == pytest.approx([1.0, 0.0, -0.5, -0.25])
    assert [s.continued for s in by_role["tester"]] == [True, False, False, False]
    assert episode.turns == 1 and episode.success and episode.team_reward == 1.0
    rewards = torch.tensor([[s.reward] for s in episode.samples])
    advantages, _ = registered_estimator()(
        token_level_rewards=rewards,
        response_mask=torch.ones_like(rewards),
        index=np.array([s.task_uid for s in episode.samples], dtype=object),
        role=np.array([s.role for s in episode.samples], dtype=object),
        turn=np.array([s.turn for s in episode.samples]),
    )
    for role in ("coder", "tester"):
        rows = [i for i, s in enumerate(episode.samples) if s.role == role]
        assert advantages[rows, 0].abs().sum() > 0 and abs(float(advantages[rows, 0].mean())) < 1e-5


def test_verl_rows_rebuild_their_task_in_a_worker(tmp_path) -> None:
    assert (
        cli.main(["data", "--env", "code", "--out", str(tmp_path), "--train", "3", "--eval", "2", "max_turns=2"]) == 0
    )
    for split, count in (("train", 3), ("eval", 2)):
        rows = load_rows(tmp_path / f"{split}.parquet")
        tasks = read_tasks(tmp_path / f"{split}.parquet")
        assert len(tasks) == count and {t.split for t in tasks} == {split}
        for row, task in zip(rows, tasks, strict=True):
            env = make_env("code", **task.options)
            env.reset(task)
            assert list(row["prompt"]) == env.observe("coder") and env.config.max_turns == 2
            assert not any(case.input.strip() in row["prompt"][1]["content"] for case in env.problem.hidden)


def test_codeio_cases_are_made_once_and_kept_in_the_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VERL_MAS_CACHE", str(tmp_path))
    entry = code_problems._codeio_entries(None)[3]
    made = code_problems._codeio_cases(entry["code_sample"], entry["input_generator"], "codeio/test/3")
    [stored] = (tmp_path / "codeio_cases").iterdir()
    assert made and len(made) <= code_problems.HIDDEN_CASES

    def no_sandbox(*args, **kwargs):
        raise AssertionError("the cache should have answered")

    monkeypatch.setattr(code_problems, "run_python", no_sandbox)
    assert code_problems._codeio_cases(entry["code_sample"], entry["input_generator"], "codeio/test/3") == made
    stored.write_text('[["x=1", "__import__(\'os\')"], "junk", ["y=2", "3"]]')  # a tampered file is data
    assert code_problems._codeio_cases(entry["code_sample"], entry["input_generator"], "codeio/test/3") == (
        CallCase("y=2", "3"),
    )
    stored.write_text("{not json")
    monkeypatch.undo()
    monkeypatch.setenv("VERL_MAS_CACHE", str(tmp_path))
    assert code_problems._codeio_cases(entry["code_sample"], entry["input_generator"], "codeio/test/3") == made


HOSTILE_PIECES = [
    "```python\n", "```input\n", "```output\n", "```\n", "```", "<think>", "</think>", "assert add(", "assert f(",
    ") == ", "1, 2", "[1, 2]", "*[1]", "x", "def add(a, b):\n", "    return a + b\n", "print(", "input()", ")",
    "import os\nos.fork()\n", "while True: pass\n", "1 2\n", "3\n", "\ud800", "\x00", "İ", "🙂", "\n", " ", "(" * 50,
]  # fmt: skip
FUNCTION_ADD = CodeProblem(
    "fn/add", "Write add(a, b).", "function", (CallCase("1, 2", "3"), CallCase("-4, 4", "0")), fn_name="add",
    reference="def add(a, b):\n    return a + b\n",
)  # fmt: skip
hostile_replies = st.tuples(
    st.lists(st.sampled_from(HOSTILE_PIECES), min_size=1, max_size=20), st.integers(1, 500)
).map(lambda drawn: "".join(drawn[0]) * drawn[1])


@pytest.mark.parametrize("rule", ["catch_share", "credit_share"])
@pytest.mark.parametrize("problem", [ADD, FUNCTION_ADD], ids=["stdin", "function"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(reply=hostile_replies)
def test_any_reply_is_a_scored_move(problem: CodeProblem, rule: str, reply: str) -> None:
    env = started(problem, case_time_s=0.5, program_time_s=1.0, tester_reward=rule)
    for role in env.roles:
        branch = env.clone()
        began = time.thread_time()
        result = branch.step(role, reply)
        assert time.thread_time() - began < 1.0  # this thread's CPU: programs run in the sandbox's processes
        assert all(math.isfinite(r) and -1.0 <= r <= 1.0 for r in (result.team_reward, result.local_reward))
        assert result.valid or result.local_reward == -0.5
        for seen in env.roles:
            for message in branch.observe(seen):
                message["content"].encode()


def test_replaying_a_move_runs_no_program_again(monkeypatch) -> None:
    """The rollout replays each chosen move on a fresh clone: its verdicts come from the cache, not the sandbox."""
    runs = []
    real = code_judge.run_python
    monkeypatch.setattr(code_judge, "run_python", lambda *a, **k: runs.append(1) or real(*a, **k))
    env = started()
    reply = {"coder": python(ADDER.replace("a + b", "b + a")), "tester": cases(("17 29", "46"), ("31 -4", "27"))}
    first = {role: env.clone().step(role, text) for role, text in reply.items()}
    made = len(runs)
    assert made >= 2  # the coder's program once, the tester's cases once (the reference and the wrong program together)
    again = {role: env.clone().step(role, text) for role, text in reply.items()}
    assert again == first and len(runs) == made


def test_a_move_the_judge_could_not_run_is_marked_and_not_remembered(monkeypatch) -> None:
    from sandbox_faults import fail_sandbox_starts

    from verl_mas.env import INFRA_FAILURE

    program = ADDER + "# judged once the host has processes again\n"  # a right program, never judged before
    env = started()
    failed = fail_sandbox_starts(monkeypatch, every=True)
    result = env.clone().step("coder", python(program))
    assert result.valid and "Resource temporarily unavailable" in result.info[INFRA_FAILURE]
    assert len(failed) == 2  # the judge's run, tried once more
    monkeypatch.undo()
    again = env.clone().step("coder", python(program))  # the failure was not cached: judged now, and right
    assert INFRA_FAILURE not in again.info and again.local_reward == 1.0


def test_a_tester_move_whose_programs_could_not_run_is_marked(monkeypatch) -> None:
    from sandbox_faults import fail_sandbox_starts

    from verl_mas.env import INFRA_FAILURE

    env = started()
    fail_sandbox_starts(monkeypatch, every=True)
    reply = cases(("1 1", "2"), ("-3 1", "-2"))
    result = env.clone().step("tester", reply)
    assert result.valid and INFRA_FAILURE in result.info and "credited" not in result.info
    monkeypatch.undo()  # the host has processes again: the failure was not remembered
    again = env.clone().step("tester", reply)
    assert INFRA_FAILURE not in again.info and again.info["failed_by_correct"] == 0 and again.info["caught"] == 1


def test_near_misses_are_the_known_wrong_programs_and_the_examples_with_one_output_off_by_one() -> None:
    env = started(dataclasses.replace(ADD, visible=(StdinCase("2 3\n", "5\n"), StdinCase("4 4\n", "8\n"))))
    assert env.near_misses("coder") == (f"```python\n{SUBTRACTER.strip()}\n```",)
    # One near miss per example: that example's output plus one, the others as shown.
    assert env.near_misses("tester") == (cases(("2 3", "6"), ("4 4", "8")), cases(("2 3", "5"), ("4 4", "9")))
    (wrong_program,) = env.near_misses("coder")
    coder = env.clone().step("coder", wrong_program)
    assert coder.valid and coder.local_reward == 0.0  # it compiles, and a - b passes none of HIDDEN
    assert env.clone().step("tester", env.expert("tester")).info["failed_by_correct"] == 0
    for reply in env.near_misses("tester"):
        tester = env.clone().step("tester", reply)
        assert tester.valid and tester.info["failed_by_correct"] == 1 and tester.info["cases"] == 2
    # A text output has no near miss: only integers are moved by one.
    text_example = started(dataclasses.replace(ADD, visible=(StdinCase("a\n", "word\n"), StdinCase("4 4\n", "8\n"))))
    assert text_example.near_misses("tester") == (cases(("a", "word"), ("4 4", "9")),)


def test_near_misses_of_function_tasks_change_int_literals_only_and_end_with_the_episode() -> None:
    examples = (CallCase("1, 2", "3"), CallCase("0, 0", "False"), CallCase("-4, 4", "0"))
    env = started(dataclasses.replace(FUNCTION_ADD, visible=examples))
    assert env.near_misses("tester") == (
        "```python\nassert add(1, 2) == 4\nassert add(0, 0) == False\nassert add(-4, 4) == 0\n```",
        "```python\nassert add(1, 2) == 3\nassert add(0, 0) == False\nassert add(-4, 4) == 1\n```",
    )
    env.step("coder", python(FUNCTION_ADD.reference))
    env.step("tester", "```python\nassert add(1, 2) == 3\n```")
    assert env.done and env.near_misses("coder") == () and env.near_misses("tester") == ()
    without_reference = started(dataclasses.replace(ADD, reference=None))
    assert without_reference.near_misses("coder") == () and without_reference.near_misses("tester") == ()
