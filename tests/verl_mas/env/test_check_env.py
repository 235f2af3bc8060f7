"""check_env: a correct environment passes, one broken on purpose per rule fails naming that rule, and every
registered environment passes in every mode."""

from __future__ import annotations

import random
import re
from importlib.metadata import entry_points

import pytest

from verl_mas.env import (
    RULES,
    CheckSettings,
    EnvCheckError,
    MultiAgentEnv,
    StepResult,
    Task,
    Workflow,
    check_env,
    get_env_class,
    split_of,
)
from verl_mas.env.registry import ENTRY_POINT_GROUP
from verl_mas.env.replies import answer_part

# Fewer seeds and a 40 KB hostile size keep the broken-env tests quick; a quadratic parser still takes ~1 s there.
QUICK = CheckSettings(seeds=3, played_seeds=1, huge_chars=40_000, step_time_limit_s=0.2)
MOVE = re.compile(r"Move: ([1-9])")


class Reach(MultiAgentEnv):
    """Roles a and b each add 1-9 to a counter, written "Move: N"; the team must hit a target in 10-40 exactly.

    team = value / target, local = N / target; a reply with no move, or one that overshoots, is invalid (-0.5).
    Every attribute is an immutable value, so a clone is a shallow copy.
    """

    def __init__(self, max_turns: int = 4, mode: str = "sequential") -> None:
        self._workflow = Workflow(roles=("a", "b"), mode=mode, max_turns=max_turns)
        self.target = self.value = self.turn = 0

    def workflow(self) -> Workflow:
        return self._workflow

    def reset(self, task: Task) -> None:
        self.target = self.draw_target(task)
        self.value = self.turn = 0

    def draw_target(self, task: Task) -> int:
        for attempt in range(1_000):
            target = random.Random(f"reach/{task.seed}/{attempt}").randint(10, 40)
            if split_of(f"reach:{target}") == task.split:
                return target
        raise RuntimeError("no target in this split")

    def observe(self, role: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": "Add 1 to 9 to the counter: end with `Move: N`."},
            {"role": "user", "content": f"role={role} value={self.value} target={self.target} turn={self.turn}"},
        ]

    def read(self, text: str) -> int | None:
        moves = MOVE.findall(answer_part(text))
        return int(moves[-1]) if moves else None

    def step(self, role: str, text: str) -> StepResult:
        move = self.read(text)
        valid = move is not None and self.value + move <= self.target
        if valid:
            self.value += move
        if role == self._workflow.roles[-1]:
            self.turn += 1
        local = move / self.target if valid else self.penalty()
        return StepResult(self.value / self.target, local, self.done, valid=valid)

    def penalty(self) -> float:
        return -0.5

    def clone(self) -> Reach:
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        return twin

    @property
    def done(self) -> bool:
        return self.value == self.target or self.turn >= self._workflow.max_turns

    def success(self) -> bool:
        return self.value == self.target

    def expert(self, role: str) -> str | None:
        return None if self.done else f"Move: {min(9, self.target - self.value)}"


# --- one broken environment per rule ---------------------------------------------------------------------------


class WorkflowNotAWorkflow(Reach):
    def workflow(self):
        return ("a", "b")


class EvalBoardsNeverBuild(Reach):
    def draw_target(self, task: Task) -> int:
        if task.split == "eval":
            raise RuntimeError("no acceptable eval board in 10000 attempts")
        return super().draw_target(task)


class EchoesTheReply(Reach):
    """Shows the last reply verbatim: a lone surrogate in it makes the prompt unencodable."""

    last = ""

    def step(self, role: str, text: str) -> StepResult:
        self.last = text[:50]
        return super().step(role, text)

    def observe(self, role: str) -> list[dict[str, str]]:
        return [*super().observe(role), {"role": "assistant", "content": self.last}]


class EmptyObservation(Reach):
    def observe(self, role: str) -> list[dict[str, str]]:
        return []


class UnseededTarget(Reach):
    def draw_target(self, task: Task) -> int:
        return random.randint(10, 10_000)  # not drawn from the task's seed


class CountsEpisodes(Reach):
    """Shows how many episodes the instance has played: state that leaks from one episode into the next."""

    episodes = 0

    def reset(self, task: Task) -> None:
        super().reset(task)
        self.episodes += 1

    def observe(self, role: str) -> list[dict[str, str]]:
        return [*super().observe(role), {"role": "user", "content": f"episode {self.episodes}"}]


class IgnoresTheSplit(Reach):
    def draw_target(self, task: Task) -> int:
        return random.Random(f"reach/{task.seed}").randint(10, 40)


class StartsSolved(Reach):
    def reset(self, task: Task) -> None:
        super().reset(task)
        self.value = self.target


class EncodesTheReply(Reach):
    def step(self, role: str, text: str) -> StepResult:
        text.encode()  # raises UnicodeEncodeError on a lone surrogate
        return super().step(role, text)


class NanPenalty(Reach):
    def penalty(self) -> float:
        return float("nan")


class EmptyReplyIsAMove(Reach):
    def read(self, text: str) -> int | None:
        return 1 if not text else super().read(text)


class HugePenalty(Reach):
    def penalty(self) -> float:
        return -100.0


class QuadraticParser(Reach):
    def read(self, text: str) -> int | None:
        answers = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)  # rescans to the end from every tag
        return super().read(answers[-1] if answers else text)


class NoisyReward(Reach):
    calls = [0]

    def step(self, role: str, text: str) -> StepResult:
        result = super().step(role, text)
        self.calls[0] += 1
        bonus = 0.01 * (self.calls[0] % 2) if result.valid else 0.0  # same move, different reward on a replay
        return StepResult(result.team_reward, result.local_reward + bonus, result.done, result.valid)


class SharedHistory(Reach):
    """Clones share one history list, which the prompt shows."""

    def reset(self, task: Task) -> None:
        super().reset(task)
        self.history: list[bool] = []

    def step(self, role: str, text: str) -> StepResult:
        result = super().step(role, text)
        self.history.append(result.valid)
        return result

    def observe(self, role: str) -> list[dict[str, str]]:
        messages = super().observe(role)
        messages[-1]["content"] += f" history={self.history}"
        return messages


class NoTurnLimit(Reach):
    @property
    def done(self) -> bool:
        return self.value == self.target


class SuccessBeforeDone(Reach):
    def success(self) -> bool:
        return self.value > 0


class SlowExpert(Reach):
    def expert(self, role: str) -> str | None:
        return None if self.done else "Move: 1"


class ReadsInsideReasoning(Reach):
    def read(self, text: str) -> int | None:
        moves = MOVE.findall(text)
        return int(moves[-1]) if moves else None


class LowersToFindTags(Reach):
    """Finds <think> in text.lower() and cuts the original there: 'İ' lengthens when lowered, so the cut is late."""

    def read(self, text: str) -> int | None:
        closing = text.lower().rfind("</think>")
        if closing >= 0:
            text = text[closing + len("</think>") :]
        opening = text.lower().find("<think>")
        moves = MOVE.findall(text if opening < 0 else text[:opening])
        return int(moves[-1]) if moves else None


BROKEN = [
    (WorkflowNotAWorkflow, "construct"),
    (EvalBoardsNeverBuild, "reset"),
    (EchoesTheReply, "observe"),
    (EmptyObservation, "observe"),
    (UnseededTarget, "reset_determinism"),
    (CountsEpisodes, "reset_determinism"),
    (IgnoresTheSplit, "split_disjoint"),
    (StartsSolved, "reset_playable"),
    (EncodesTheReply, "step_never_raises"),
    (NanPenalty, "step_result"),
    (EmptyReplyIsAMove, "invalid_flagged"),
    (HugePenalty, "invalid_flagged"),
    (QuadraticParser, "bounded_step"),
    (NoisyReward, "step_determinism"),
    (SharedHistory, "clone_independence"),
    (NoTurnLimit, "max_turns"),
    (SuccessBeforeDone, "success_implies_done"),
    (SlowExpert, "expert_solves"),
    (ReadsInsideReasoning, "reasoning_ignored"),
    (LowersToFindTags, "reasoning_ignored"),
]


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_a_correct_environment_passes_every_rule(mode: str) -> None:
    report = check_env(Reach, mode=mode)
    assert report.checked == tuple(RULES) and not report.skipped
    # 2 splits x 2 played seeds x (expert episode + empty-reply episode), 18 hostile replies at each move
    assert report.steps > 2 * 2 * 18 * 2


def test_the_quick_settings_still_pass_a_correct_environment() -> None:
    assert check_env(Reach, QUICK).checked == tuple(RULES)


@pytest.mark.parametrize(("broken", "rule"), BROKEN, ids=[cls.__name__ for cls, _ in BROKEN])
def test_a_broken_environment_fails_naming_its_rule(broken: type[Reach], rule: str) -> None:
    with pytest.raises(EnvCheckError) as failure:
        check_env(broken, QUICK)
    assert failure.value.rule == rule, str(failure.value)
    assert str(failure.value).startswith(f"{rule}: ") and RULES[rule] in str(failure.value)


def test_every_rule_has_a_broken_environment() -> None:
    assert {rule for _, rule in BROKEN} == set(RULES)


def test_messages_say_what_was_seen() -> None:
    with pytest.raises(EnvCheckError, match=r"the 'many answer tags' reply \(40,000 characters\) .* took"):
        check_env(QuadraticParser, QUICK)
    with pytest.raises(EnvCheckError, match=r"'lone surrogates' reply .* holds text no tokenizer can encode"):
        check_env(EchoesTheReply, QUICK)
    inside = r"counted as the answer: move inside <think> at seed 0 \(train\), turn 0, role 'a'"
    with pytest.raises(EnvCheckError, match=inside):
        check_env(ReadsInsideReasoning, QUICK)


def test_without_an_expert_the_expert_rules_are_reported_skipped() -> None:
    class NoExpert(Reach):
        def expert(self, role: str) -> None:
            return None

    report = check_env(NoExpert, QUICK)
    assert set(report.skipped) == {"expert_solves", "reasoning_ignored"}
    assert "role 'a'" in report.skipped["expert_solves"]


def test_options_reach_the_constructor() -> None:
    with pytest.raises(EnvCheckError, match="construct: Reach.*raised ValueError: Workflow.max_turns"):
        check_env(Reach, QUICK, max_turns=0)


BUILT_IN = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
TOOL_PLAN_MODES = {
    "compact": {"tool_mode": "compact"},
    "code": {"tool_mode": "code"},
    "single_agent": {"tool_mode": "compact", "single_agent": True},
    "brief_prompts": {"tool_mode": "compact", "brief_prompts": True, "max_turns": 3},
}
PARALLEL_MODES = {"default": {}, "single_agent": {"single_agent": True}, "brief_prompts": {"brief_prompts": True}}
MODES = {name: PARALLEL_MODES if name in ("code", "math") else TOOL_PLAN_MODES for name in BUILT_IN}


def test_the_built_in_environments_are_registered() -> None:
    assert BUILT_IN == ["code", "math", "plan_path", "sokoban", "sudoku"]


@pytest.mark.parametrize(
    "name, mode", [(name, mode) for name in BUILT_IN for mode in sorted(MODES[name])], ids="-".join
)
def test_every_registered_environment_passes_in_every_mode(name: str, mode: str) -> None:
    report = check_env(get_env_class(name), **MODES[name][mode])
    assert report.checked == tuple(RULES) and not report.skipped
