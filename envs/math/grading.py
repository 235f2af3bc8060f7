"""Grading math answers: the final `\\boxed{}` of a reply, normalised where math-verify errs, then math-verify.

math-verify alone (0.9.0, gold first) takes a bare number from a reply with no box, falls back to an earlier box
when the last is empty, drops units (`5 m` = `5 cm`), equates a set with a tuple (`\\{1,2\\}` = `(1,2)`), accepts
a rounded decimal for a fraction (0.3333333333333333 = 1/3), and rejects repeating decimals (`0.\\overline{3}`),
thin-space thousands (`12\\,345`) and a trailing period (`5.`). So here:

- the answer is the content of the last `\\boxed{...}` (braces balanced, `\\{` and `\\}` skipped) of the reply's
  answer part (`verl_mas.env.replies.answer_part`): no box, an unclosed last box, an empty one or one holding only
  the prompt's placeholder (`\\boxed{...}`, as a small model echoes "give your answer as \\boxed{...}") is no answer;
- an answer that is not well-formed LaTeX (`verl_mas_envs.math.latex_form`: an unbalanced brace, `\\left`/`\\right`,
  `\\begin`/`\\end` or bracket, an odd `$`, a dangling `^` or `_`) grades "malformed": math-verify would repair
  `\\frac{3}{4` into 3/4;
- `i` is the imaginary unit when no other letter appears on either side (`i` = `\\sqrt{-1}`, `i^2` = `-1`); beside
  another letter (`i + j`, `x = i`) it stays a symbol, since it may be an index or a variable;
- both sides are normalised: `$...$` and a trailing period dropped, thousands separators joined, Python's `**`
  read as `^`, and every decimal (repeating, finite, with an exponent) rewritten as the exact fraction it is, so
  math-verify compares exact rationals and a rounded decimal equals only itself;
- two rules are applied before math-verify: units, when both sides give one, must be the same; a set never equals
  a tuple or an interval;
- integers and decimals on both sides are compared exactly here; identical texts are equal; everything else goes
  to math-verify through `verl_mas_envs.math.verify_pool` (a worker process, a hard deadline: a hostile answer costs at
  most `deadline_s` and grades wrong).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from verl_mas.env.replies import answer_part

from .latex_form import is_well_formed
from .verify_pool import GradingPool, default_pool

#: longest answer graded; a longer one grades wrong without a look (no real answer is this long)
MAX_GRADED_CHARS = 1_000
DEFAULT_DEADLINE_S = 5.0

Reason = Literal[
    "equal", "different", "no_answer", "too_long", "malformed", "unit_mismatch", "set_vs_tuple", "timeout", "error"
]  # fmt: skip

_BOX = "\\boxed"
_DELIMITERS = ((r"$$", r"$$"), ("$", "$"), (r"\(", r"\)"), (r"\[", r"\]"))
_TRAILING_PERIOD = re.compile(r"\s*\.\s*$")
_THOUSANDS_SPACE = re.compile(r"(?<=\d)(?:\\,|\\;|\\:|\\ |~|\{,\})(?=\d{3}(?!\d))")
# comma thousands before a decimal part (12,345.5), read as math-verify reads them, before decimals become fractions
_THOUSANDS_COMMA = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?=\.\d)")
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\overline\s*\{(\d+)\}")
_DECIMAL = re.compile(r"(?<![\d.])(?:(\d*)\.(\d+)|(\d+))(?:[eE]([-+]?\d{1,3}))?(?![\d.])")
# what a box holds when a reply echoes the prompt's "\boxed{...}": dots, an ellipsis, \ldots and the like
_PLACEHOLDER = re.compile(r"(?:\s|\.|…|\\[lcv]?dots)+")
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)")
_UNIT = re.compile(
    r"[-+]?(?:\d+\.?\d*|\.\d+)(?:\s|\\[,;:! ]|~)*"
    r"(?:\\(?:text|mathrm|textrm|mbox|operatorname)\s*\{([^{}]*)\}|([A-Za-z]+(?:\^\d)?(?:/[A-Za-z]+(?:\^\d)?)?))"
)


@dataclass(frozen=True)
class Grade:
    """How an answer graded.

    Attributes:
        correct: the answer equals the gold answer.
        answer: the answer read (the last box's content, stripped); None when there was none.
        reason: why it is (not) correct.
    """

    correct: bool
    answer: str | None
    reason: Reason


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` in `text`; None if there is none or the last one never closes.

    One pass: the last `\\boxed` followed by `{` is found from the end, then its braces are matched forward; a
    backslash escapes the next character (`\\{`, `\\}` are literal braces, `\\\\` a line break).
    """
    end = len(text)
    while (start := text.rfind(_BOX, 0, end)) >= 0:
        opening = start + len(_BOX)
        while opening < len(text) and text[opening].isspace():
            opening += 1
        if opening < len(text) and text[opening] == "{":
            break
        end = start
    else:
        return None
    depth, position = 0, opening
    while position < len(text):
        char = text[position]
        if char == "\\":
            position += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[opening + 1 : position]
        position += 1
    return None


def final_answer(reply: str) -> str | None:
    """The answer a reply gives: its last box's content, stripped; None when there is no box, or it is empty or holds
    only the placeholder `...`."""
    boxed = last_boxed(answer_part(reply))
    if boxed is None or not boxed.strip() or _PLACEHOLDER.fullmatch(boxed):
        return None
    return boxed.strip()


def normalise(answer: str) -> str:
    """`answer` with the forms math-verify misreads rewritten (see the module docstring); decimals become exact."""
    return _exact_decimals(_surface(answer))


def grade_response(
    gold: str, reply: str, deadline_s: float = DEFAULT_DEADLINE_S, pool: GradingPool | None = None
) -> Grade:
    """Grade a model reply (its last box) against `gold`."""
    return grade_answer(gold, final_answer(reply), deadline_s, pool)


def grade_answer(
    gold: str, answer: str | None, deadline_s: float = DEFAULT_DEADLINE_S, pool: GradingPool | None = None
) -> Grade:
    """Grade an answer already read (a box's content, a program's printed line) against `gold`."""
    if answer is None or not answer.strip():
        return Grade(False, None, "no_answer")
    answer = answer.strip()
    if len(answer) > MAX_GRADED_CHARS:
        return Grade(False, answer, "too_long")
    if not is_well_formed(answer):
        return Grade(False, answer, "malformed")
    gold_text = last_boxed(gold) if _BOX in gold else gold
    reason = _compare(_surface(gold_text or ""), _surface(answer), deadline_s, pool)
    return Grade(reason == "equal", answer, reason)


def _compare(gold: str, answer: str, deadline_s: float, pool: GradingPool | None) -> Reason:
    if not answer:
        return "no_answer"
    if gold == answer:
        return "equal"
    units = _unit(gold), _unit(answer)
    if None not in units and units[0] != units[1]:
        return "unit_mismatch"
    kinds = {_bracket_kind(gold), _bracket_kind(answer)}
    if kinds == {"set", "ordered"}:
        return "set_vs_tuple"
    if _PLAIN_NUMBER.fullmatch(gold) and _PLAIN_NUMBER.fullmatch(answer) and len(gold) <= MAX_GRADED_CHARS:
        return "equal" if Fraction(gold) == Fraction(answer) else "different"
    exact_gold, exact_answer = _exact_decimals(gold), _exact_decimals(answer)
    return (pool or default_pool()).verify(_boxed(exact_gold), _boxed(exact_answer), deadline_s)


def _surface(text: str) -> str:
    """Delimiters and a trailing period dropped, thousands separators joined, `**` read as `^`."""
    text = text.strip()
    for opening, closing in _DELIMITERS:
        if len(text) >= len(opening) + len(closing) and text.startswith(opening) and text.endswith(closing):
            text = text[len(opening) : -len(closing)].strip()
            break
    text = _TRAILING_PERIOD.sub("", text)
    text = _THOUSANDS_SPACE.sub("", text)
    text = _THOUSANDS_COMMA.sub(lambda match: match.group().replace(",", ""), text)
    return text.replace("**", "^")


def _exact_decimals(text: str) -> str:
    """Every repeating or finite decimal (with an optional exponent) rewritten as its exact fraction."""
    text = _REPEATING.sub(lambda m: _latex_fraction(_repeating_value(*m.groups())), text)
    return _DECIMAL.sub(_decimal_fraction, text)


def _repeating_value(whole: str, fixed: str, repeated: str) -> Fraction:
    scale = 10 ** len(fixed)
    # digits r repeated after a fixed digits are worth r / (10^a (10^len(r) - 1))
    period = Fraction(int(repeated), scale * (10 ** len(repeated) - 1))
    return int(whole or "0") + Fraction(int(fixed or "0"), scale) + period


def _decimal_fraction(match: re.Match[str]) -> str:
    whole, fraction_digits, integer, exponent = match.groups()
    if integer is not None and exponent is None:
        return integer  # a plain integer stays as written
    value = Fraction(int((whole or integer or "0") + (fraction_digits or "")), 10 ** len(fraction_digits or ""))
    return _latex_fraction(value * Fraction(10) ** int(exponent or "0"))


def _latex_fraction(value: Fraction) -> str:
    if value.denominator == 1:
        return f"{{{value.numerator}}}"
    return f"{{\\frac{{{value.numerator}}}{{{value.denominator}}}}}"


def _unit(text: str) -> str | None:
    """The unit after a number (`5 cm`, `5\\text{ cm}`), spaces dropped; None when the text is not number + unit."""
    match = _UNIT.fullmatch(text)
    if match is None:
        return None
    return re.sub(r"\s+", "", match.group(1) if match.group(1) is not None else match.group(2))


def _bracket_kind(text: str) -> Literal["set", "ordered"] | None:
    """The brackets around an answer: "set" for `\\{...\\}`, "ordered" for a tuple or an interval."""
    text = text.replace("\\left", "").replace("\\right", "").replace("\\lbrace", "\\{").replace("\\rbrace", "\\}")
    if text.startswith("\\{") and text.endswith("\\}"):
        return "set"
    if text[:1] in ("(", "[") and text[-1:] in (")", "]"):
        return "ordered"
    return None


def _boxed(text: str) -> str:
    return f"{_BOX}{{{text}}}"
