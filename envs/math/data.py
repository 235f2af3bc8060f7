"""Math problem files read into `MathProblem`s: AIME 24/25, OlympiadBench, Polaris-style and DAPO-style rows.

Forms (a file holds one; "auto" tells them apart by the first row's keys):
- "problem_answer": `problem` (or `question`, `Problem`, `Question`) and `answer` (or `Answer`): Polaris, AIME 25,
  MATH-style sets. A numeric answer becomes its text.
- "aime": the same keys, and every answer must be an integer in [0, 999] (written without leading zeros).
- "olympiadbench": `question` (after `context` when there is one) and `final_answer`, a list of answers or that
  list stored as text (a Python or JSON list literal); several answers are joined by ", ", `$` delimiters dropped.
- "prompt_ground_truth": verl rows, `prompt` (chat messages or text; the last user message) and
  `reward_model.ground_truth`: DAPO-Math. DAPO's instructions around the problem (answer after "Answer:") are
  dropped, since the environment asks for a boxed answer.
A malformed row is a ValueError naming the file and the row (0-based), raised before anything is returned.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from verl_mas.data_files import rows_in_form

Form = Literal["auto", "problem_answer", "aime", "olympiadbench", "prompt_ground_truth"]
FORMS: tuple[Form, ...] = ("auto", "problem_answer", "aime", "olympiadbench", "prompt_ground_truth")

_PROBLEM_KEYS = ("problem", "question", "Problem", "Question")
_ANSWER_KEYS = ("answer", "Answer")
_DAPO_WRAPPER = re.compile(
    r"Solve the following math problem step by step\. The last line of your response should be of the form "
    r"Answer: \$Answer \(without quotes\) where \$Answer is the answer to the problem\.\s*(.*?)\s*"
    r"Remember to put your answer on its own line after \"Answer:\"\.?",
    re.DOTALL,
)


@dataclass(frozen=True)
class MathProblem:
    """A problem statement and its gold answer (LaTeX or plain text)."""

    problem: str
    answer: str


def load_problems(path: str | Path, form: Form = "auto") -> tuple[MathProblem, ...]:
    """Every problem of a parquet or jsonl file in `form`."""
    rows, form = rows_in_form(path, form, FORMS, detect_form, "math")
    return tuple(problem_from_row(row, form, f"{path}: row {number}") for number, row in enumerate(rows))


def detect_form(row: Any, where: str) -> Form:
    """The form a row is in, from its keys."""
    keys = set(row) if isinstance(row, Mapping) else set()
    if "final_answer" in keys:
        return "olympiadbench"
    if {"prompt", "reward_model"} <= keys:
        return "prompt_ground_truth"
    if keys & set(_PROBLEM_KEYS) and keys & set(_ANSWER_KEYS):
        return "problem_answer"
    raise ValueError(
        f"{where}: cannot tell the form from the keys {sorted(keys)}; expected problem/answer, question/"
        "final_answer (OlympiadBench) or prompt/reward_model.ground_truth"
    )


def problem_from_row(row: Any, form: Form, where: str) -> MathProblem:
    """One row in `form` (not "auto"); `where` names the row in errors."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: row is {type(row).__name__}, expected a mapping")
    if form in ("problem_answer", "aime"):
        problem = _text(_first(row, _PROBLEM_KEYS, where), "problem", where)
        answer = _answer_text(_first(row, _ANSWER_KEYS, where), where)
        if form == "aime":
            if not re.fullmatch(r"\d{1,3}", answer):
                raise ValueError(f"{where}: an AIME answer is an integer in [0, 999], got {answer!r}")
            answer = str(int(answer))
        return MathProblem(problem, answer)
    if form == "olympiadbench":
        question = _text(row.get("question"), "question", where)
        context = row.get("context")
        problem = f"{context.strip()}\n\n{question}" if isinstance(context, str) and context.strip() else question
        return MathProblem(problem, _olympiad_answer(row.get("final_answer"), where))
    if form == "prompt_ground_truth":
        reward_model = row.get("reward_model")
        if not isinstance(reward_model, Mapping):
            raise ValueError(f"{where}: reward_model must be a mapping with ground_truth, got {reward_model!r}")
        answer = _answer_text(reward_model.get("ground_truth"), where, "reward_model.ground_truth")
        return MathProblem(_prompt_problem(row.get("prompt"), where), answer)
    raise ValueError(f"{where}: unknown math data form {form!r}; forms are {FORMS[1:]}")


def _first(row: Mapping, keys: tuple[str, ...], where: str) -> Any:
    for key in keys:
        if row.get(key) is not None:
            return row[key]
    raise ValueError(f"{where}: missing {' / '.join(keys)}")


def _text(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {what} must be non-empty text, got {value!r}")
    return value.strip()


def _answer_text(value: Any, where: str, what: str = "answer") -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError(f"{where}: {what} must be finite, got {value!r}")
        return str(value)
    return _text(value, what, where)


def _olympiad_answer(value: Any, where: str) -> str:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:  # a Python literal or JSON: literal_eval reads both (and runs nothing)
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
                raise ValueError(f"{where}: final_answer is not a list written as text: {text[:80]!r}") from exc
        else:
            value = [text]
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"{where}: final_answer must be a non-empty list of answers, got {value!r}")
    answers = [_answer_text(item, where, "each final_answer").strip("$").strip() for item in value]
    if not all(answers):
        raise ValueError(f"{where}: final_answer holds an empty answer: {value!r}")
    return ", ".join(answers)


def _prompt_problem(prompt: Any, where: str) -> str:
    if isinstance(prompt, list | tuple):
        users = [m.get("content") for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        if not users:
            raise ValueError(f"{where}: prompt has no user message")
        prompt = users[-1]
    text = _text(prompt, "prompt", where)
    wrapped = _DAPO_WRAPPER.fullmatch(text)
    return _text(wrapped.group(1), "the problem inside the prompt", where) if wrapped else text
