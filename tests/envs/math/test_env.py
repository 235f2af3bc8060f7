"""Math env: check_env in every mode, rewards by role, agreement, turns, problem sources and splits, verl rows, and
hostile answers and programs (contained by the sandbox and the grading deadline)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import reasoning_gym
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl_mas.dataset import row_task, rows_of_tasks
from verl_mas.env import CheckSettings, Task, check_env, split_of
from verl_mas.rollout import Generation, GenerationRequest, RolloutConfig, rollout_task
from verl_mas.router import PolicyRouter
from verl_mas_envs.math.data import MathProblem
from verl_mas_envs.math.env import MathEnv, arithmetic_expression, problem_tasks
from verl_mas_envs.math.grading import grade_answer
from verl_mas_envs.puzzles.toolplan import INVALID_OUTPUT_REWARD

TENTHS = MathProblem("What is 1/10 + 2/10?", "\\frac{3}{10}")
QUICK = CheckSettings(seeds=4, played_seeds=1)


def code(program: str) -> str:
    return f"```python\n{program}\n```"


def started(problem: MathProblem = TENTHS, **options: object) -> MathEnv:
    env = MathEnv(problem=problem.problem, answer=problem.answer, **options)
    env.load(problem)
    return env


def write_problem_file(path: Path, count: int) -> Path:
    rows = [{"problem": f"What is {n} + {n}?", "answer": str(2 * n)} for n in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize(
    "options",
    [{}, {"brief_prompts": True}, {"single_agent": True}, {"single_agent": True, "brief_prompts": True}],
    ids=["full", "brief", "single", "single_brief"],
)
def test_check_env_generated(options: dict) -> None:
    report = check_env(MathEnv, QUICK, **options)
    assert "expert_solves" in report.checked and "split_disjoint" in report.checked


def test_check_env_data_file(tmp_path: Path) -> None:
    path = write_problem_file(tmp_path / "sums.jsonl", 40)
    check_env(MathEnv, QUICK, data_file=str(path), max_turns=2)


@pytest.mark.parametrize(
    ("reply", "local", "valid"),
    [
        ("1/10 + 2/10 = 3/10, so \\boxed{\\frac{3}{10}}", 1.0, True),
        ("\\boxed{0.3}", 1.0, True),
        ("\\boxed{\\frac{1}{3}}", 0.0, True),
        ("\\boxed{0.30000000000000004}", 0.0, True),  # the float 1/10 + 2/10 is not the answer
        ("the answer is 3/10", INVALID_OUTPUT_REWARD, False),  # no box
        ("\\boxed{\\frac{3}{10}} hmm, no: \\boxed{}", INVALID_OUTPUT_REWARD, False),  # empty last box, no fallback
        ("<think>\\boxed{\\frac{3}{10}}</think>", INVALID_OUTPUT_REWARD, False),
        ("<think>three tenths</think>\\boxed{3/10}", 1.0, True),
    ],
)
def test_reasoner_rewards(reply: str, local: float, valid: bool) -> None:
    result = started().step("reasoner", reply)
    assert (result.local_reward, result.valid, result.done) == (local, valid, False)
    assert result.team_reward == (1.0 if local == 1.0 else 0.0)  # the team's answer is the reasoner's


@pytest.mark.parametrize(
    ("reply", "local", "error"),
    [
        (code("from fractions import Fraction\nprint(Fraction(1, 10) + Fraction(2, 10))"), 1.0, None),
        (code("print('working...')\nprint(0.3)"), 1.0, None),  # the last line is the answer
        (code("print(1/10 + 2/10)"), 0.0, None),  # 0.30000000000000004
        (code("print('\\\\boxed{\\\\frac{3}{10}}')"), 1.0, None),
        ("print(0.3)", INVALID_OUTPUT_REWARD, "no ```python code block"),
        (code("print(1/0)"), INVALID_OUTPUT_REWARD, "exited with code 1"),
        (code("x = 0.3"), INVALID_OUTPUT_REWARD, "printed no answer"),
        (code("print('\\\\boxed{}')"), INVALID_OUTPUT_REWARD, "printed no answer"),
        ("<think>" + code("print(0.3)") + "</think>", INVALID_OUTPUT_REWARD, "no ```python code block"),
    ],
)
def test_tool_rewards(reply: str, local: float, error: str | None) -> None:
    result = started().step("tool", reply)
    assert result.local_reward == local and result.valid is (error is None)
    assert error is None or error in result.info["error"]
    assert result.team_reward == 0.0  # no answer from the reasoner yet


def test_turn_ends_when_both_answered_and_agreement_ends_the_episode() -> None:
    env = started()
    first = env.step("reasoner", "\\boxed{\\frac{3}{10}}")
    assert not first.done and env.observe("tool") == started().observe("tool")  # parallel: not shown before turn end
    second = env.step("tool", code("print('3/10')"))
    assert (second.done, second.team_reward, second.local_reward) == (True, 1.0, 1.0)
    assert env.success() and env.state.outcome == "agreed" and env.expert("tool") is None


def test_agreeing_on_a_wrong_answer_ends_the_episode_as_a_failure() -> None:
    env = started()
    env.step("reasoner", "\\boxed{0.25}")
    result = env.step("tool", code("print('1/4')"))  # equal to the reasoner's answer, both wrong
    assert result.done and not env.success() and env.state.outcome == "agreed"


def test_disagreement_shows_both_answers_and_runs_to_max_turns() -> None:
    env = started(max_turns=2)
    env.step("tool", code("print(1/10 + 2/10)"))
    assert not env.step("reasoner", "\\boxed{\\frac{3}{10}}").done  # the order within a turn does not matter
    for role in ("reasoner", "tool"):
        prompt = env.observe(role)[1]["content"]
        assert "the reasoning agent answered: \\frac{3}{10}" in prompt
        assert "the tool agent's program printed: 0.30000000000000004" in prompt
        assert "do not agree" in prompt
    env.step("reasoner", "no box this time")  # the team's answer stays the last readable one
    result = env.step("tool", code("print(2)"))
    assert result.done and env.state.outcome == "out_of_turns"
    assert env.success() and result.team_reward == 1.0  # the reasoner's latest readable answer is correct


def test_brief_prompts_keep_the_problem_and_the_answers() -> None:
    env = started(brief_prompts=True)
    env.step("reasoner", "\\boxed{7}")
    env.step("tool", "no code")
    system, user = env.observe("tool")
    assert system["content"] == "You are the tool agent."
    assert user["content"] == f"{TENTHS.problem}\nR: 7\nT: no answer (no ```python code block)"


def test_single_agent_ends_at_its_first_readable_answer() -> None:
    env = started(single_agent=True, max_turns=3)
    assert env.workflow().roles == ("reasoner",) and env.workflow().mode == "parallel"
    assert not env.step("reasoner", "I think 3/10").done
    assert "Your answer was not readable" in env.observe("reasoner")[1]["content"]
    result = env.step("reasoner", "\\boxed{1/3}")
    assert result.done and not env.success() and env.state.outcome == "answered"
    with pytest.raises(ValueError, match="unknown role"):
        env.observe("tool")


def test_misuse_of_the_api_raises_but_model_output_never_does() -> None:
    env = started()
    env.step("reasoner", "\\boxed{1}")
    with pytest.raises(RuntimeError, match="already answered turn 0"):
        env.step("reasoner", "\\boxed{1}")
    with pytest.raises(ValueError, match="unknown role"):
        env.step("critic", "x")
    with pytest.raises(RuntimeError, match="reset"):
        MathEnv(problem="Q", answer="1").observe("tool")


def test_a_boxed_power_tower_grades_wrong_within_the_grading_deadline() -> None:
    env = started(grade_time_limit_s=0.5)
    began = time.monotonic()
    result = env.step("reasoner", "\\boxed{2^{2^{2^{2^{2^{2}}}}} + 9^{9^{9^{9}}}}")
    assert (result.valid, result.local_reward) == (True, 0.0)
    assert time.monotonic() - began < 0.5 + 30  # the deadline, plus a grading worker's start on a loaded machine


@pytest.mark.sandbox
@pytest.mark.parametrize(
    ("program", "error"),
    [
        ("while True:\n    pass", "ran out of time"),
        ("x = bytearray(10**10)\nprint(1)", "ran out of memory"),
        ("import os\nprint(os.listdir('/work'))", "FileNotFoundError"),  # the host's files are not there
        ("import os\nwhile True:\n    os.fork()", None),  # contained by the process limit; never the answer
        ("print('1' * 10**7)", None),  # output capped
    ],
)
def test_hostile_programs_are_contained(program: str, error: str | None) -> None:
    env = started(code_time_limit_s=1.0)
    began = time.monotonic()
    result = env.step("tool", code(program))
    assert time.monotonic() - began < 25 and result.local_reward <= 0.0 and not result.valid
    assert error is None or error in result.info["error"]


@pytest.mark.sandbox
def test_programs_cannot_see_the_gold_answer() -> None:
    """No input, a scrubbed environment and a fresh working directory holding only the program itself."""
    program = "import os, sys\nprint(repr(sys.stdin.read()), sorted(os.environ), os.listdir('.'))"
    result = started().step("tool", code(program))
    assert result.info["answer"] == "'' ['HOME', 'LANG', 'PATH'] ['main.py']" and result.local_reward == 0.0


PIECES = [
    "\\boxed{", "\\boxed", "{", "}", "\\{", "\\}", "\\\\", "3", "10", ".", "\\overline{", "\\frac{", "^{", "2^{2^{",
    "\\,", ",", " cm", "(", "]", "<think>", "</think>", "```python\n", "```", "print(", ")", "'", "\n", "\ud800", "İ",
    "\x00", "🙂", "\\text{", "e5", "-",
]  # fmt: skip
replies = st.tuples(st.lists(st.sampled_from(PIECES), min_size=1, max_size=25), st.integers(1, 2_000)).map(
    lambda drawn: "".join(drawn[0]) * drawn[1]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(reply=replies)
def test_any_reply_is_a_scored_move(reply: str) -> None:
    env = started(grade_time_limit_s=1.0, code_time_limit_s=1.0)
    for role in env.roles:
        branch = env.clone()
        began = time.thread_time()
        result = branch.step(role, reply)
        assert time.thread_time() - began < 1.0  # CPU of this thread: programs and grading run in other processes
        assert -1.0 <= result.local_reward <= 1.0 and result.team_reward in (0.0, 1.0)
        for seen in env.roles:
            for message in branch.observe(seen):
                message["content"].encode()


def test_tasks_are_deterministic_and_splits_disjoint() -> None:
    env = MathEnv()
    seen: dict[str, set[str]] = {"train": set(), "eval": set()}
    for split in seen:
        for seed in range(30):
            env.reset(Task(f"t{seed}", "math", seed, split))
            seen[split].add(env.problem.problem)
            assert split_of(env.problem.problem) == split
    assert not seen["train"] & seen["eval"] and len(seen["train"]) == len(seen["eval"]) == 30
    twin = MathEnv()
    twin.reset(Task("t", "math", 7, "eval"))
    env.reset(Task("t", "math", 7, "eval"))
    assert twin.problem == env.problem and twin.observe("tool") == env.observe("tool")


def test_experts_play_generated_golds_in_their_own_forms() -> None:
    for source in ("basic_arithmetic", "fraction_simplification"):  # "-4"; "$\\dfrac{54}{275}$"
        env = MathEnv(source=source)
        env.reset(Task("t", "math", 3, "train"))
        assert env.step("reasoner", env.expert("reasoner")).local_reward == 1.0
        assert env.step("tool", env.expert("tool")).local_reward == 1.0
        assert env.success()


def test_grading_agrees_with_reasoning_gyms_own_scorer_on_arithmetic() -> None:
    dataset = reasoning_gym.create_dataset("basic_arithmetic", seed=11, size=20)
    for entry in dataset:
        gold = entry["answer"]
        for candidate in (gold, str(int(gold) + 1), f"-{gold}".replace("--", "")):
            expected = dataset.score_answer(candidate, entry) == 1.0
            assert grade_answer(gold, candidate).correct is expected, (entry["question"], candidate)
        # one deliberate difference: an equal value in another form counts here, not there
        assert grade_answer(gold, f"{gold}.0").correct and dataset.score_answer(f"{gold}.0", entry) < 1.0


def test_source_options_reach_reasoning_gym() -> None:
    options = {"min_terms": 2, "max_terms": 2, "max_digits": 2, "operators": ["+"], "allow_parentheses": False,
               "allow_negation": False}  # fmt: skip
    env = MathEnv(source_options=options)
    for seed in range(5):
        env.reset(Task("t", "math", seed, "train"))
        left, right = env.problem.problem.removeprefix("Calculate ").rstrip(".").split(" + ")
        assert int(left) + int(right) == int(env.problem.answer)


def test_data_file_problems_follow_the_hash_split(tmp_path: Path) -> None:
    path = write_problem_file(tmp_path / "sums.jsonl", 40)
    env = MathEnv(data_file=str(path))
    for split in ("train", "eval"):
        for seed in range(10):
            env.reset(Task("t", "math", seed, split))
            assert split_of(env.problem.problem) == split
            n = int(env.problem.problem.split()[2])
            assert env.problem.answer == str(2 * n)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_turns": 0}, "max_turns"),
        ({"single_agent": "no"}, "single_agent"),
        ({"grade_time_limit_s": float("inf")}, "grade_time_limit_s"),
        ({"code_time_limit_s": 0}, "code_time_limit_s"),
        ({"problem": "Q"}, "problem and answer must be given together"),
        ({"problem": "Q", "answer": " "}, "problem and answer must be given together"),
        ({"data_form": "csv"}, "data_form"),
        ({"source": "no_such_dataset"}, "unknown math source 'no_such_dataset'"),
        ({"source_options": {"max_terms": 0}}, "max_terms"),
        ({"source_options": {"bogus": 1}}, "bogus"),
        ({"data_file": "/no/such/file.jsonl"}, "No such file"),
    ],
)
def test_bad_options_fail_at_construction(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MathEnv(**options)


def test_a_file_too_small_to_split_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no problem falls in the eval split"):
        MathEnv(data_file=str(write_problem_file(tmp_path / "two.jsonl", 2)))


def test_problem_tasks_rebuild_their_task_from_the_row_alone() -> None:
    problems = [TENTHS, MathProblem("What is 2 + 2?", "4")]
    tasks = problem_tasks(problems, "eval", {"max_turns": 2, "brief_prompts": True})
    assert [(t.seed, t.split, t.options["problem"]) for t in tasks] == [
        (0, "eval", TENTHS.problem),
        (1, "eval", "What is 2 + 2?"),
    ]
    rows = rows_of_tasks(tasks)
    assert len(rows) == 2
    for number, (row, problem) in enumerate(zip(rows, problems, strict=True)):
        task = row_task(row, f"row {number}")  # what every verl worker does with its row
        assert (task.env, task.split, task.options["answer"]) == ("math", "eval", problem.answer)
        env = MathEnv()
        env.reset(task)
        assert env.problem == problem and env.config.max_turns == 2
        assert env.observe("reasoner") == row["prompt"]
    with pytest.raises(ValueError, match="split"):
        rows_of_tasks(problem_tasks(problems, "test"))


def test_expert_rollout_through_the_tree_rollout() -> None:
    """The parallel workflow end to end: K candidates per role on clones, the chosen moves replayed jointly."""

    async def generate(request: GenerationRequest) -> list[Generation]:
        texts = [request.expert or "", "\\boxed{0}" if request.role == "reasoner" else code("print(0)")]
        return [Generation(text=text, prompt_ids=(1,), response_ids=(2,)) for text in texts]

    task = Task("math/0", "math", 0, "train", {"problem": TENTHS.problem, "answer": TENTHS.answer})
    router = PolicyRouter.from_spec("shared", ("reasoner", "tool"))
    result = asyncio.run(rollout_task(task, generate, router, RolloutConfig(k=2, with_expert=True)))
    assert result.error is None and result.success and result.turns == 1
    rewards = {(s.role, s.branch): (s.local_reward, s.continued) for s in result.samples}
    assert rewards == {
        ("reasoner", 0): (1.0, True), ("reasoner", 1): (0.0, False), ("tool", 0): (1.0, True), ("tool", 1): (0.0, False)
    }  # fmt: skip


@pytest.mark.parametrize(
    "problem, gold, expected",
    [
        ("Calculate 5 - 3.", "2", "5 - 3"),
        ("Calculate ( -9 / 9 ).", "-1", "( -9 / 9 )"),
        ("Calculate 2 - -1.", "3", "2 - -1"),
        ("Calculate 7 / 2.", "3.5", "7 / 2"),
        ("Calculate 1 + 1.", "3", None),  # the written expression is not the answer
        ("How many legs have 12 spiders?", "96", None),  # no operator: nothing to compute
        ("Calculate 2 ** 3.", "8", None),  # powers are not plain arithmetic here
        ("Calculate 1 / 0 + 1.", "1", None),
        ("Simplify 44404/50320.", "54/275", None),  # Python would print 0.8824324324324324
    ],
)
def test_the_tool_expert_computes_a_written_arithmetic_expression(problem, gold, expected) -> None:
    assert arithmetic_expression(problem, gold) == expected
    env = MathEnv()
    env.load(MathProblem(problem, gold))
    program = env.expert("tool")
    assert program == f"```python\nprint({expected if expected is not None else repr(gold)})\n```"
    assert env.clone().step("tool", program).local_reward == 1.0


def test_a_tool_program_the_sandbox_could_not_run_is_left_out_of_its_group(monkeypatch) -> None:
    """The sandbox fails one candidate's run on purpose: that sample is marked, stays out of the group's mean and std,
    and counts in mas/infra_failures."""
    from sandbox_faults import FAIL_MARK, fail_sandbox_starts

    from verl_mas.local.train import sample_advantages
    from verl_mas.metrics import infra_failure_metrics
    from verl_mas.sample import trainable

    failed = fail_sandbox_starts(monkeypatch)
    tool_programs = [code("print(0.3)"), code("print(0)"), code(f"print(0.3)\n{FAIL_MARK}")]

    async def generate(request: GenerationRequest) -> list[Generation]:
        texts = ["\\boxed{0.3}"] * 3 if request.role == "reasoner" else tool_programs
        return [Generation(text=text, prompt_ids=(1,), response_ids=(2,)) for text in texts]

    task = Task("math/0", "math", 0, "train", {"problem": TENTHS.problem, "answer": TENTHS.answer})
    router = PolicyRouter.from_spec("shared", ("reasoner", "tool"))
    result = asyncio.run(rollout_task(task, generate, router, RolloutConfig(k=3, max_turns=1)))
    tool = [s for s in result.samples if s.role == "tool"]
    assert [s.infra_failure is not None for s in tool] == [False, False, True] and len(failed) == 2  # retried once
    assert [s.reward for s in tool[:2]] == [1.0, 0.0] and tool[2].valid
    samples = trainable(result.samples)
    advantages = sample_advantages(samples, "task_role_turn")
    # the tool group is (1, 0): mean 0.5, unbiased std sqrt(0.5); with the failed sample it would be (1, 0, -0.5)
    tool_advantages = [a for s, a in zip(samples, advantages.tolist(), strict=True) if s.role == "tool"]
    assert tool_advantages == pytest.approx([0.5 / (0.5**0.5 + 1e-6), -0.5 / (0.5**0.5 + 1e-6)])
    assert infra_failure_metrics(1, len(result.samples), 0.2, "max_infra_failure_share") == {"mas/infra_failures": 1.0}
    with pytest.raises(RuntimeError, match=r"1 of 6 samples could not be judged .* max_infra_failure_share = 0.1"):
        infra_failure_metrics(1, len(result.samples), 0.1, "max_infra_failure_share")
