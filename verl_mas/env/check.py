"""`check_env`: the conformance checker for a `MultiAgentEnv` class, each failure naming the rule it broke.

Run it on your own environment (in a test) and on every built-in one:

    from verl_mas.env import check_env
    check_env(MyGame, size=4)             # the constructor's options
    check_env(MyGame, CheckSettings(seeds=20), size=4)

It builds instances with the options, resets them to tasks of both splits, and plays episodes through the
workflow: one following `expert()` (when every role has one) and one answering "" to every prompt. At every
move it also steps clones with hostile replies and with the expert's move wrapped in reasoning. A broken rule
raises `EnvCheckError` whose `rule` is a key of `RULES`; the message says what was seen.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from verl_mas.env.base import MultiAgentEnv, StepResult, Task, Workflow

RULES: dict[str, str] = {
    "construct": "the class builds with the options and its workflow() is a Workflow",
    "reset": "reset(task) succeeds for every seed and split the constructor's options allow",
    "observe": "observe(role) returns a non-empty list of {'role': system|user|assistant, 'content': str} messages "
    "whose text is valid Unicode (encodable as UTF-8), in every state",
    "reset_determinism": "the same task gives the same observations: in a fresh instance and after an episode",
    "split_disjoint": "no train task starts from the same observations as an eval task",
    "reset_playable": "after reset the episode is neither done nor successful",
    "step_never_raises": "step never raises on model output, however hostile",
    "step_result": "step returns a StepResult with finite rewards, bool done and valid, and a dict info",
    "invalid_flagged": "a reply with no move in it is flagged valid=False with a local reward in [-max_penalty, 0]",
    "bounded_step": "a step on a huge hostile reply takes at most step_time_limit_s of CPU (no parser worse than "
    "linear)",
    "step_determinism": "the same reply in the same state gives the same result and the same next observations",
    "clone_independence": "stepping a clone never changes the original, and stepping the original never a clone",
    "max_turns": "an episode is done after workflow().max_turns turns",
    "success_implies_done": "success() is true only when done is true",
    "expert_solves": "where every role has an expert, its moves are valid and solve the task within max_turns",
    "reasoning_ignored": "text inside <think>...</think>, or after an unclosed <think>, never counts as the answer",
}

Observations = tuple[tuple[str, tuple[tuple[tuple[str, Any], ...], ...]], ...]
T = TypeVar("T")


class EnvCheckError(AssertionError):
    """An environment broke a rule of `RULES`; `rule` names it."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"{rule}: {detail}\n  rule: {RULES[rule]}")
        self.rule = rule
        self.detail = detail


@dataclass(frozen=True)
class CheckSettings:
    """How hard `check_env` looks.

    Attributes:
        seeds: tasks per split for the reset rules.
        played_seeds: of those, tasks per split played through as episodes.
        huge_chars: length of the huge hostile replies.
        step_time_limit_s: the most CPU time (of the calling thread: other load on the machine does not count)
            one step on a hostile reply may take.
        max_penalty: bound on the penalty of an invalid move.
    """

    seeds: int = 6
    played_seeds: int = 2
    huge_chars: int = 100_000
    step_time_limit_s: float = 2.0
    max_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not 1 <= self.played_seeds <= self.seeds:
            raise ValueError(f"CheckSettings needs 1 <= played_seeds <= seeds, got {self.played_seeds}, {self.seeds}")
        if not (self.huge_chars >= 1 and self.step_time_limit_s > 0 and self.max_penalty >= 0):
            raise ValueError(f"CheckSettings: huge_chars, step_time_limit_s must be positive, max_penalty >= 0: {self}")


@dataclass(frozen=True)
class CheckReport:
    """What `check_env` did: the rules it checked, those it could not (and why), and how many steps it made."""

    checked: tuple[str, ...]
    skipped: Mapping[str, str]
    steps: int


def hostile_replies(huge: int) -> dict[str, str]:
    """Replies with no move in them, by name: malformed, unusual characters, unbalanced tags, and huge ones
    (each built so that a parser scanning from every tag or fence again would take quadratic time)."""
    return {
        "empty": "",
        "whitespace": " \t\n\r\x0b\x0c",
        "control characters": "\x00\x01\x7f\x1b[2J",
        "unicode": "Ｕ Ｒ 上 右 🙂🙃 \u200b\u202e ﷽ Ω̷̛",
        "lone surrogates": "\ud800 \udfff \udc80",
        "unbalanced tags": "</answer><answer><think></think></think><answer></think><think>",
        "unclosed reasoning": "<think>" + "still thinking " * 50,
        "unclosed code block": "```python\nprint(",
        "lone surrogate in code": "```python\nprint('\ud800')\n```",
        "lengthening lowercase": "İ" * 100,
        "huge text": "x" * huge,
        "huge unicode": "é🙂" * (huge // 2),
        "huge number": "9" * huge,
        "huge blank lines": "\n" * huge,
        "many answer tags": "<answer>" * (huge // 8),
        "many think tags": "</think><think>" * (huge // 15),
        "many code fences": "```x" * (huge // 4),
        "nested brackets": "[" * (huge // 2) + "]" * (huge // 2),
    }


def reasoning_replies(move: str) -> tuple[tuple[str, str, bool], ...]:
    """(name, reply, whether it holds a move) for a valid move wrapped in reasoning."""
    return (
        ("move inside <think>", f"<think>\n{move}\n</think>", False),
        ("move after an unclosed <think>, behind 'İ'", "İ" * 20 + f"<think>\n{move}", False),
        ("move after closed reasoning", f"<think>\nLet me think.\n</think>\n{move}", True),
    )


def check_env(env_cls: type[MultiAgentEnv], settings: CheckSettings | None = None, /, **options: Any) -> CheckReport:
    """Check `env_cls` built with `options` against every rule of `RULES`; raise `EnvCheckError` at the first
    broken one. Returns what was checked."""
    return _Checker(env_cls, options, settings or CheckSettings()).run()


class _Checker:
    """One check_env run: builds instances, plays episodes, and raises on the first broken rule."""

    def __init__(self, env_cls: type[MultiAgentEnv], options: dict[str, Any], settings: CheckSettings) -> None:
        self.env_cls = env_cls
        self.options = options
        self.settings = settings
        self.name = getattr(env_cls, "name", "") or env_cls.__name__
        self.hostile = hostile_replies(settings.huge_chars)
        self.skipped: dict[str, str] = {}
        self.steps = 0

    def run(self) -> CheckReport:
        env = self.build()
        self.workflow = _call("construct", "workflow()", env.workflow)
        if not isinstance(self.workflow, Workflow):
            raise EnvCheckError("construct", f"workflow() returned {self.workflow!r}, not a Workflow")
        self.roles = self.workflow.roles
        starts: dict[str, dict[Observations, int]] = {"train": {}, "eval": {}}
        for split in starts:
            for seed in range(self.settings.seeds):
                task = Task(f"check/{split}/{seed}", self.name, seed, split)
                env, first = self.start(task)
                starts[split].setdefault(first, seed)
                if seed < self.settings.played_seeds:
                    self.play(env, task, first)
        shared = starts["train"].keys() & starts["eval"].keys()
        if shared:
            first = next(iter(shared))
            raise EnvCheckError(
                "split_disjoint",
                f"train seed {starts['train'][first]} and eval seed {starts['eval'][first]} start from the same "
                "observations",
            )
        checked = tuple(rule for rule in RULES if rule not in self.skipped)
        return CheckReport(checked, dict(self.skipped), self.steps)

    # --- building and resetting ---------------------------------------------------------------------------------

    def build(self) -> MultiAgentEnv:
        env = _call("construct", f"{self.env_cls.__name__}(**{self.options!r})", lambda: self.env_cls(**self.options))
        if not isinstance(env, MultiAgentEnv):
            built = type(env).__name__
            raise EnvCheckError("construct", f"{self.env_cls.__name__}(...) built {built}, not a MultiAgentEnv")
        return env

    def reset(self, env: MultiAgentEnv, task: Task) -> Observations:
        what = f"reset(seed {task.seed}, {task.split})"
        _call("reset", what + " (options the constructor accepts must give a task)", lambda: env.reset(task))
        observations = self.observe_all(env, f"after {what}")
        if _call("reset_playable", "done", lambda: env.done) or _call("reset_playable", "success()", env.success):
            raise EnvCheckError("reset_playable", f"after {what} the episode is already done or successful")
        return observations

    def start(self, task: Task) -> tuple[MultiAgentEnv, Observations]:
        env = self.build()
        first = self.reset(env, task)
        again = self.reset(self.build(), task)
        _same("reset_determinism", f"two fresh instances reset to seed {task.seed} ({task.split})", first, again)
        return env, first

    # --- playing ------------------------------------------------------------------------------------------------

    def play(self, env: MultiAgentEnv, task: Task, first: Observations) -> None:
        """Play the task through with the expert (if every role has one) and with "" replies, checking each move."""
        missing = [role for role in self.roles if _expert(env, role, "at the start") is None]
        if missing:
            reason = f"expert() returns None for role {missing[0]!r} at the start"
            self.skipped.update(expert_solves=reason, reasoning_ignored=reason)
        else:
            self.walk(env, task, expert=True)
            if not _call("expert_solves", "success()", env.success):
                raise EnvCheckError(
                    "expert_solves", f"following expert() from seed {task.seed} ({task.split}) did not solve the task"
                )
            _same("reset_determinism", "a reset after an episode and a fresh one", first, self.reset(env, task))
        self.walk(env, task, expert=False)
        _same("reset_determinism", "a reset after an episode and a fresh one", first, self.reset(env, task))

    def walk(self, env: MultiAgentEnv, task: Task, expert: bool) -> None:
        """One episode through the workflow, every role replying with its expert move or with ""."""
        source = "expert" if expert else "empty"
        for turn in range(self.workflow.max_turns):
            for role in self.roles:
                if _call("success_implies_done", "done", lambda: env.done):
                    return
                where = f"seed {task.seed} ({task.split}), turn {turn}, role {role!r}"
                reply = ""
                if expert:
                    reply = _expert(env, role, f"at {where}")
                    if reply is None:
                        raise EnvCheckError("expert_solves", f"expert({role!r}) returned None at {where}, not done")
                self.hostile_moves(env, role, where)
                if expert:
                    self.reasoning_moves(env, role, reply, where)
                result = self.checked_move(env, role, reply, f"the {source} reply at {where}")
                if expert and not result.valid:
                    raise EnvCheckError("expert_solves", f"the expert's move at {where} was flagged invalid: {result}")
        if not _call("max_turns", "done", lambda: env.done):
            raise EnvCheckError(
                "max_turns", f"after {self.workflow.max_turns} turns of {source} replies, done is still false"
            )

    def checked_move(self, env: MultiAgentEnv, role: str, reply: str, what: str) -> StepResult:
        """Step `env` with `reply`, then the same on a clone taken before: equal results, neither touching the other."""
        before = self.observe_all(env, f"before {what}")
        twin = _call("clone_independence", "clone()", env.clone)
        result = self.step(env, role, reply, what)
        twin_seen = self.observe_all(twin, "the clone")
        _same("clone_independence", f"a clone after stepping the original with {what}", before, twin_seen)
        after = self.observe_all(env, f"after {what}")
        twin_result = self.step(twin, role, reply, what + " on a clone")
        original_seen = self.observe_all(env, "the original")
        _same("clone_independence", f"the original after stepping its clone with {what}", after, original_seen)
        if _outcome(result) != _outcome(twin_result):
            raise EnvCheckError(
                "step_determinism", f"{what} gave {_outcome(result)} and then, on a clone, {_outcome(twin_result)}"
            )
        twin_seen = self.observe_all(twin, "the clone")
        _same("step_determinism", f"the state after {what} and after the same on a clone", after, twin_seen)
        return result

    def hostile_moves(self, env: MultiAgentEnv, role: str, where: str) -> None:
        before = self.observe_all(env, f"at {where}")
        for name, reply in self.hostile.items():
            branch = _call("clone_independence", "clone()", env.clone)
            what = f"the {name!r} reply ({len(reply):,} characters) at {where}"
            started = time.thread_time()
            result = self.step(branch, role, reply, what)
            seconds = time.thread_time() - started
            if seconds > self.settings.step_time_limit_s:
                raise EnvCheckError(
                    "bounded_step", f"{what} took {seconds:.2f} s of CPU (limit {self.settings.step_time_limit_s} s)"
                )
            penalty = self.settings.max_penalty
            if result.valid or not -penalty <= result.local_reward <= 0:
                raise EnvCheckError(
                    "invalid_flagged",
                    f"{what} gave valid={result.valid}, local reward {result.local_reward} (bound {penalty})",
                )
            self.observe_all(branch, f"after {what}")
        seen = self.observe_all(env, "the original")
        _same("clone_independence", f"the original after hostile replies to its clones at {where}", before, seen)

    def reasoning_moves(self, env: MultiAgentEnv, role: str, move: str, where: str) -> None:
        for name, reply, holds_move in reasoning_replies(move):
            result = self.step(_call("clone_independence", "clone()", env.clone), role, reply, f"the {name} at {where}")
            if result.valid != holds_move:
                counted = "counted as the answer" if result.valid else "was not read after the reasoning"
                raise EnvCheckError("reasoning_ignored", f"the expert's move {counted}: {name} at {where}")

    def step(self, env: MultiAgentEnv, role: str, reply: str, what: str) -> StepResult:
        result = _call("step_never_raises", f"step({role!r}, {what})", lambda: env.step(role, reply))
        self.steps += 1
        _check_step_result(result, what)
        done = _call("success_implies_done", "done", lambda: env.done)
        if _call("success_implies_done", "success()", env.success) and not done:
            raise EnvCheckError("success_implies_done", f"after {what}, success() is true but done is false")
        return result

    def observe_all(self, env: MultiAgentEnv, when: str) -> Observations:
        return tuple((role, _observation(env, role, when)) for role in self.roles)


def _expert(env: MultiAgentEnv, role: str, where: str) -> str | None:
    return _call("expert_solves", f"expert({role!r}) {where}", lambda: env.expert(role))


def _observation(env: MultiAgentEnv, role: str, when: str) -> tuple[tuple[tuple[str, Any], ...], ...]:
    messages = _call("observe", f"observe({role!r}) {when}", lambda: env.observe(role))
    if not isinstance(messages, list | tuple) or not messages:
        raise EnvCheckError("observe", f"observe({role!r}) {when} returned {messages!r}")
    for message in messages:
        if not (
            isinstance(message, dict)
            and message.get("role") in ("system", "user", "assistant")
            and isinstance(message.get("content"), str)
        ):
            raise EnvCheckError("observe", f"observe({role!r}) {when} holds the message {message!r}")
        try:
            message["content"].encode()
        except UnicodeEncodeError as exc:  # a tokenizer cannot encode it: the next generation would fail
            detail = f"observe({role!r}) {when} holds text no tokenizer can encode: {exc}"
            raise EnvCheckError("observe", detail) from exc
    return tuple(tuple(sorted(message.items())) for message in messages)


def _check_step_result(result: object, what: str) -> None:
    if not isinstance(result, StepResult):
        raise EnvCheckError("step_result", f"{what} returned {type(result).__name__}, not a StepResult")
    for field in ("team_reward", "local_reward"):
        value = getattr(result, field)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise EnvCheckError("step_result", f"{what} gave {field}={value!r}")
    if not (isinstance(result.done, bool) and isinstance(result.valid, bool) and isinstance(result.info, dict)):
        raise EnvCheckError(
            "step_result",
            f"{what} gave done={result.done!r}, valid={result.valid!r}, info of type {type(result.info).__name__}",
        )


def _outcome(result: StepResult) -> tuple[float, float, bool, bool]:
    return result.team_reward, result.local_reward, result.done, result.valid


def _same(rule: str, what: str, expected: Observations, seen: Observations) -> None:
    if expected == seen:
        return
    role = next(role for (role, mine), (_, theirs) in zip(expected, seen, strict=True) if mine != theirs)
    raise EnvCheckError(rule, f"{what}: observe({role!r}) differs")


def _call(rule: str, what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except EnvCheckError:
        raise
    except Exception as exc:
        raise EnvCheckError(rule, f"{what} raised {type(exc).__name__}: {exc}") from exc
