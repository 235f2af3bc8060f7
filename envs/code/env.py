"""Code: a coder writes a program and a tester writes test cases, each turn in parallel, until the program passes them.

The coder answers with a program in a ```python block: for a stdin task one that reads stdin and prints, for a
function task one that defines the task's function. The tester answers with up to `max_tester_cases` cases: for a
stdin task pairs of ```input and ```output blocks, for a function task `assert f(args) == value` lines of Python
literals. Both act on the same state each turn; from turn 1 both see the latest program and how it did on the
latest cases (each mismatch: input, expected, actual). The episode ends when a turn's latest program passes every
latest case (there must be one), or after `max_turns`. Success: the latest program passes every hidden case.
With `single_agent=True` the coder plays alone and the episode ends at its first program that compiles.

Every program runs in the sandbox through `verl_mas_envs.code.judge` (one run per program for all its cases, the
task's trusted programs sharing one); hidden cases never appear in a prompt and their expected results never enter
the sandbox.

Rewards, per move (team = the latest program passes every hidden case):

| role   | move                                           | local reward                        | team reward |
|--------|------------------------------------------------|-------------------------------------|-------------|
| coder  | a program that compiles                        | share of hidden cases it passes     | 1 if team   |
| tester | one or more cases                              | `tester_reward` (below)             | 1 if team   |
| both   | no code block or case; a program not compiling | -0.5 (invalid)                      | 1 if team   |

The tester's reward (`verl_mas_envs.code.tester_reward`): with `catch_share` (the default), the share of the
known-wrong programs that its valid cases (those a correct program passes) catch, minus `tester_case_penalty` for
every case the correct program fails, repeats of an input included, never below -0.25; with `credit_share`, the
share of its cases that are well-formed, new (not a repeat of an earlier input of the reply), passed by a correct
program and failed by some known-wrong program. The correct program is the task's reference, or else a program of
the coder's from this episode that passed every hidden case; with neither, no case can be checked and the reward is
0. Known-wrong programs: the task's own (data files' incorrect solutions), up to `wrong_programs` mutants of the
reference that fail a hidden case (`verl_mas_envs.code.mutants`), and the coder's earlier programs of the episode
that failed one; with none, no case can show it catches anything (under `catch_share` the penalty still applies).

Tasks come from `verl_mas_envs.code.problems` (`source`, `source_options`, or `data_file` with `data_form`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from verl_mas.env import INFRA_FAILURE, StepResult, register_env
from verl_mas.env.replies import extract_python
from verl_mas_envs.common import (
    INVALID_OUTPUT_REWARD,
    READ_LIMIT_NOTE,
    config_of,
    is_number,
    require_flags,
    require_ints,
    require_problem_source,
    require_seconds,
)
from verl_mas_envs.problem_team import FILE_SPLITS, FileSplit, ProblemTeamEnv
from verl_mas_envs.worked_example import require_example_apart

from .cases import CallCase, CodeProblem, StdinCase, TestCase, brief_example, off_by_one, written_cases
from .judge import CaseResult, JudgeLimits, Program, infra_failure, judge_each
from .problems import CACHE_VARIABLE, brief_statement, check_options, file_problem, file_problems, task_problem
from .tester_reply import TesterReply, read_tester_reply
from .tester_reward import TESTER_REWARDS, TesterReward, Verdicts, tester_reward
from .verdict_cache import judged, judged_together, known_wrong_programs

ROLES = ("coder", "tester")
SINGLE_AGENT_ROLES = ("coder",)
Outcome = Literal["playing", "passed", "submitted", "out_of_turns"]
SHOWN_CHARS = 200  # of one input, expected or actual output in a mismatch


@dataclass(frozen=True)
class CodeConfig:
    """Options of the code environment (a task's options override them for its episode)."""

    source: str = "arithmetic"  # see verl_mas_envs.code.problems
    source_options: Mapping[str, Any] = field(default_factory=dict)
    data_file: str | None = None
    data_form: str = "auto"
    file_split: FileSplit = "hash"  # "all": every problem of data_file in both splits
    max_turns: int = 3
    single_agent: bool = False
    # the prompt opens with one solved first turn on a fixed training problem (verl_mas_envs.worked_example)
    worked_example: bool = False
    brief_prompts: bool = False
    brief_examples: bool = False  # brief prompts also show the statement's examples ("9 2 -> 27")
    max_tester_cases: int = 8
    tester_reward: TesterReward = "catch_share"  # see verl_mas_envs.code.tester_reward
    tester_case_penalty: float = 1.0  # catch_share: taken off per case the correct program fails
    wrong_programs: int = 3  # mutants of the reference tried as known-wrong programs
    shown_mismatches: int = 3
    case_time_s: float = 2.0
    program_time_s: float = 10.0  # all the cases of one program together

    def __post_init__(self) -> None:
        require_problem_source(self, FILE_SPLITS)
        require_ints(self, max_turns=1, max_tester_cases=1, wrong_programs=0, shown_mismatches=0)
        require_flags(self, "single_agent", "brief_prompts", "brief_examples", "worked_example")
        require_example_apart(self)
        require_seconds(self, "case_time_s", "program_time_s")
        if self.brief_examples and not self.brief_prompts:
            raise ValueError("brief_examples shows examples in brief prompts: it needs brief_prompts=true")
        if self.tester_reward not in TESTER_REWARDS:
            raise ValueError(f"tester_reward must be one of {TESTER_REWARDS}, got {self.tester_reward!r}")
        penalty = self.tester_case_penalty
        if not (is_number(penalty) and 0 <= penalty < math.inf):
            raise ValueError(f"tester_case_penalty must be a finite number >= 0, got {penalty!r}")

    @property
    def limits(self) -> JudgeLimits:
        return JudgeLimits(case_time_s=self.case_time_s, budget_s=self.program_time_s)


@dataclass(frozen=True)
class Mismatch:
    """A tester case the latest program failed: its input, what was expected, what the program did."""

    shown_input: str
    expected: str
    actual: str


@dataclass(frozen=True)
class CodeState:
    """An episode's state; immutable, so a clone shares it.

    Attributes:
        turn: completed turns.
        program: the coder's latest program that compiled (None before the first).
        solved: `program` passes every hidden case.
        cases: the tester's latest cases.
        checked: the latest program's results on the latest cases, as of the last completed turn.
        failing: the coder's programs of this episode that failed a hidden case (known-wrong).
        passing: a program of the coder's that passed every hidden case (a correct program when the task has
            no reference).
        pending_program, pending_cases: this turn's moves so far (the turn completes when every role moved).
        moved: the roles that moved this turn.
        outcome: "playing" until the episode ends.
    """

    turn: int = 0
    program: str | None = None
    solved: bool = False
    cases: tuple[TestCase, ...] = ()
    checked: tuple[CaseResult, ...] = ()
    failing: tuple[str, ...] = ()
    passing: str | None = None
    pending_program: str | None = None
    pending_cases: tuple[TestCase, ...] | None = None
    moved: frozenset[str] = frozenset()
    outcome: Outcome = "playing"


CODER_SYSTEM = (
    "You are the coder of a two-agent team solving a programming task. Your teammate, the tester, writes test cases "
    "for the same task. Each turn you both answer at once; from the second turn on, both of you see the latest "
    "program and the tester's cases it failed. The episode ends when the program passes all of the tester's cases; "
    "the team is scored on hidden tests. Answer with the complete program in one ```python code block. {style}"
)
TESTER_SYSTEM = (
    "You are the tester of a two-agent team solving a programming task. Your teammate, the coder, writes the "
    "program. Each turn you both answer at once; from the second turn on, both of you see the latest program and "
    "the cases it failed. Write up to {count} test cases, each with its exact expected result, that a correct "
    "program passes and a wrong one fails: small, valid inputs that cover edge cases. {style}"
)
CODER_STYLE = {
    "stdin": "The program reads its input from standard input and prints the answer.",
    "function": "Define the function `{fn}` (any helpers it needs too); it is called directly: no input, no print.",
}
TESTER_STYLE = {
    "stdin": "Give each case as a ```input block with the exact standard input, then a ```output block with the "
    "exact expected output.",
    "function": "Give the cases as lines `assert {fn}(arguments) == expected` of Python literals, in one ```python "
    "block.",
}
SINGLE_SYSTEM = "Solve the programming task. Answer with the complete program in one ```python code block. {style}"


@register_env("code")
class CodeEnv(ProblemTeamEnv[CodeConfig, CodeProblem, CodeState]):
    """Code for a coder and a tester (parallel), or the coder alone; its options are `CodeConfig`'s."""

    label = "code"
    problem_source_options = frozenset({"source", "source_options", "data_file", "data_form", "file_split"})
    # every reward worker reads and fills the generated cases there
    shared_folder_variables = MappingProxyType(
        {CACHE_VARIABLE: "its case cache, each node's ~/.cache/verl_mas if unset"}
    )
    team_roles = ROLES
    single_agent_roles = SINGLE_AGENT_ROLES

    def __init__(self, **options: Any) -> None:
        config = config_of(CodeConfig, options)
        super().__init__(config)
        _check_problems(config)
        self._check_worked_example()

    def _task_problem(self, config: CodeConfig, seed: int, split: str) -> CodeProblem:
        if config.data_file is not None:
            return file_problem(config.data_file, config.data_form, seed, split, config.file_split)
        return task_problem(config.source, config.source_options, seed, split)

    def _new_state(self) -> CodeState:
        return CodeState()

    def success(self) -> bool:
        return self.done and self.state.solved

    def step(self, role: str, text: str) -> StepResult:
        self._check_role(role)
        state = self.state
        if self.done:
            raise RuntimeError(f"code: step({role!r}) after the episode ended ({state.outcome})")
        if role in state.moved:
            raise RuntimeError(f"code: {role!r} already moved in turn {state.turn}")
        if role == "coder":
            local, valid, info, state = self._coder_move(state, text)
        else:
            local, valid, info, state = self._tester_move(state, text)
        state = replace(state, moved=state.moved | {role})
        if state.moved == frozenset(self.roles):
            state = self._complete_turn(state)
        self._state = state
        return StepResult(float(state.solved), local, self.done, valid=valid, info=info)

    def expert(self, role: str) -> str | None:
        self._check_role(role)
        problem = self.problem
        if self.done or problem.reference is None:
            return None
        if role == "coder":
            return f"```python\n{problem.reference.strip()}\n```"
        return written_cases(problem.visible, problem) if problem.visible else None  # the statement's examples

    def near_misses(self, role: str) -> tuple[str, ...]:
        """The coder: each known-wrong program (the task's own wrong programs as given, and mutants that failed a
        hidden case when judged: on a loaded machine a mutant's verdict, and so this tuple, can differ). The tester:
        the statement's examples with one integer expected output off by one, for each such example."""
        self._check_role(role)
        problem = self.problem
        if self.done or problem.reference is None:
            return ()
        if role == "coder":
            return tuple(f"```python\n{source.strip()}\n```" for source in self._known_wrong())
        visible = problem.visible
        return tuple(
            written_cases((*visible[:i], replace(case, expected=wrong), *visible[i + 1 :]), problem)
            for i, case in enumerate(visible)
            if (wrong := off_by_one(case)) is not None
        )

    # --- the episode ---------------------------------------------------------------------------------------------

    def _program(self, source: str) -> Program:
        return Program.for_problem(self.problem, source)

    def _coder_move(self, state: CodeState, text: str) -> tuple[float, bool, dict[str, object], CodeState]:
        source = extract_python(text)
        if source is None:
            return INVALID_OUTPUT_REWARD, False, {"error": "no ```python code block"}, state
        results = judged(self._program(source), self.problem.hidden, self.config.limits)
        if (why := infra_failure(results)) is not None:  # not the program's doing: no verdict, the state stays
            return 0.0, True, {INFRA_FAILURE: why}, state
        if any(r.status == "syntax_error" for r in results):
            error = next(r.actual for r in results if r.status == "syntax_error")
            return INVALID_OUTPUT_REWARD, False, {"error": f"the program does not compile: {error}"}, state
        share = sum(r.passed for r in results) / len(results)
        solved = share == 1.0
        state = replace(
            state,
            pending_program=source,
            solved=solved,
            failing=state.failing if solved or source in state.failing else (*state.failing, source),
            passing=source if solved and state.passing is None else state.passing,
        )
        return share, True, {"hidden_passed": share}, state

    def _tester_move(self, state: CodeState, text: str) -> tuple[float, bool, dict[str, object], CodeState]:
        reply = read_tester_reply(text, self.problem, self.config.max_tester_cases)
        if not reply.cases:
            return INVALID_OUTPUT_REWARD, False, {"error": "no usable test case", "degenerate": reply.degenerate}, state
        verdicts = self._verdicts(state, reply)
        if isinstance(verdicts, str):  # the judge could not run a program on the cases: no reward can be given
            return 0.0, True, {INFRA_FAILURE: verdicts}, state
        config = self.config
        reward = tester_reward(config.tester_reward, verdicts, reply.degenerate, config.tester_case_penalty)
        info = {
            "cases": len(reply.cases),
            "degenerate": reply.degenerate,
            "credited": verdicts.credited,
            "caught": verdicts.caught_programs,
            "known_wrong": verdicts.known_wrong,
            "failed_by_correct": verdicts.failed_by_correct,
        }
        return reward, True, info, replace(state, pending_cases=reply.cases)

    def _verdicts(self, state: CodeState, reply: TesterReply) -> Verdicts | str:
        """How a correct program and the known-wrong ones do on the reply's cases, then its repeats; why not, when
        the judge could not run one of them."""
        cases = (*reply.cases, *reply.repeats)
        correct = self.problem.reference if self.problem.reference is not None else state.passing
        wrong = tuple(dict.fromkeys((*self._known_wrong(), *state.failing)))
        if correct is None:
            return Verdicts(len(reply.cases), None, (frozenset(),) * len(cases), len(wrong))
        trusted = (correct, *self._known_wrong()) if self.problem.reference is not None else ()
        written = [self._program(source) for source in (correct, *wrong) if source not in trusted]  # by the model
        limits = self.config.limits
        by_source = dict(zip(trusted, judged_together(tuple(map(self._program, trusted)), cases, limits), strict=True))
        by_source |= dict(zip((p.source for p in written), judge_each(written, cases, limits, run=judged), strict=True))
        correct_results, *wrong_results = (by_source[source] for source in (correct, *wrong))
        for results in (correct_results, *wrong_results):
            if (why := infra_failure(results)) is not None:
                return why
        caught = tuple(
            frozenset(j for j, results in enumerate(wrong_results) if not results[i].passed) for i in range(len(cases))
        )
        return Verdicts(len(reply.cases), tuple(r.passed for r in correct_results), caught, len(wrong))

    def _known_wrong(self) -> tuple[str, ...]:
        return known_wrong_programs(self.problem, self.config.wrong_programs, self.config.limits)

    def _complete_turn(self, state: CodeState) -> CodeState:
        turn = state.turn + 1
        program = state.pending_program if state.pending_program is not None else state.program
        cases = state.pending_cases if state.pending_cases is not None else state.cases
        if self.config.single_agent:
            outcome: Outcome = "submitted" if program is not None else "playing"
            checked: tuple[CaseResult, ...] = ()
        else:
            checked = judged(self._program(program), cases, self.config.limits) if program and cases else ()
            outcome = "passed" if checked and all(r.passed for r in checked) else "playing"
        if outcome == "playing" and turn >= self.config.max_turns:
            outcome = "out_of_turns"
        return replace(
            state,
            turn=turn,
            program=program,
            cases=cases,
            checked=checked,
            pending_program=None,
            pending_cases=None,
            moved=frozenset(),
            outcome=outcome,
        )

    # --- prompts -------------------------------------------------------------------------------------------------

    def _system_prompt(self, role: str) -> str:
        problem = self.problem
        if self.config.brief_prompts:
            return "You solve it alone." if self.config.single_agent else f"You are the {role} agent."
        style = (CODER_STYLE if role == "coder" else TESTER_STYLE)[problem.style].format(fn=problem.fn_name)
        if self.config.single_agent:
            return SINGLE_SYSTEM.format(style=style)
        if role == "coder":
            return CODER_SYSTEM.format(style=style)
        return TESTER_SYSTEM.format(count=self.config.max_tester_cases, style=style)

    def _user(self, role: str) -> str:
        problem, state = self.problem, self.state
        if self.config.brief_prompts:
            lines = [brief_statement(problem)]
            if self.config.brief_examples:
                lines += [brief_example(case, problem) for case in problem.visible]
            if state.program is not None:
                lines.append(f"prog:\n{state.program.strip()}")
            lines += [f"in:{m.shown_input} want:{m.expected} got:{m.actual}" for m in self._mismatches()]
            return "\n".join(lines)
        parts = [f"Task:\n{problem.statement.strip()}"]
        if problem.starter.strip() and problem.starter.strip() not in problem.statement:
            parts.append(f"Starter code:\n```python\n{problem.starter.rstrip()}\n```")
        if state.turn:
            parts.append(self._progress())
        request = "Write the program." if role == "coder" else "Write your test cases."
        parts.append(f"{request} {READ_LIMIT_NOTE}")
        return "\n\n".join(parts)

    def _progress(self) -> str:
        state = self.state
        if state.program is None:
            return "No program has compiled yet."
        lines = [f"The latest program:\n```python\n{state.program.rstrip()}\n```"]
        if not state.cases:
            lines.append("The tester has no usable case yet.")
        else:
            passed = sum(r.passed for r in state.checked)
            lines.append(f"It passed {passed} of the tester's {len(state.cases)} latest cases.")
            for mismatch in self._mismatches():
                lines.append(
                    f"- input: {mismatch.shown_input}\n  expected: {mismatch.expected}\n  actual: {mismatch.actual}"
                )
        lines.append("Check the program and the cases, and answer again.")
        return "\n".join(lines)

    def _mismatches(self) -> list[Mismatch]:
        state = self.state
        if not state.checked:  # no program compiled yet: nothing was run on the cases
            return []
        failed = [(case, result) for case, result in zip(state.cases, state.checked, strict=True) if not result.passed]
        return [_mismatch(case, result) for case, result in failed[: self.config.shown_mismatches]]


def _mismatch(case: TestCase, result: CaseResult) -> Mismatch:
    if isinstance(case, StdinCase):
        shown, expected = case.input, case.expected
    elif isinstance(case, CallCase):
        shown, expected = case.args, case.expected
    else:
        shown, expected = case.code, "no error"
    actual = result.actual if result.status in ("passed", "wrong") else f"{result.status}: {result.actual}"
    return Mismatch(_short(shown), _short(expected), _short(actual))


def _short(text: str) -> str:
    text = text.strip()
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + " ..."
    return text.encode("utf-8", "replace").decode("utf-8")


def _check_problems(config: CodeConfig) -> None:
    """Options that can give no problem fail here, at construction, not at some later reset."""
    if config.data_file is None:
        check_options(config.source, config.source_options)
        return
    empty = [
        split
        for split, problems in file_problems(config.data_file, config.data_form, config.file_split).items()
        if not problems
    ]
    if empty:
        raise ValueError(f"{config.data_file}: no problem falls in the {empty[0]} split (too few problems)")
