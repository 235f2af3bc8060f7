"""Math grading: the last box, the normalisations math-verify needs, equivalent forms, and hostile answers bounded by
the worker pool's hard deadline."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from math_verify import LatexExtractionConfig, parse, verify

from verl_mas_envs.math.grading import (
    MAX_GRADED_CHARS,
    final_answer,
    grade_answer,
    grade_response,
    last_boxed,
    normalise,
)
from verl_mas_envs.math.verify_pool import GradingPool, PoolSettings

TOWER = "2^{2^{32}}"  # math-verify spends its whole own timeout (2 s here) on it against a small number


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("so \\boxed{5}", "5"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),  # escaped braces do not close the box
        ("\\boxed{a_{b_{c}}}", "a_{b_{c}}"),
        ("\\boxed {7}", "7"),
        ("\\boxed{\\\\}", "\\\\"),  # a LaTeX line break, then the closing brace
        ("\\boxed{3} and \\boxed", "3"),  # a bare \boxed with no braces is no box
        ("\\boxed{1} then \\boxed{2", None),  # the last box never closes: no answer, not the earlier box
        ("no box at all: 5", None),
        ("\\boxed{\\boxed{4}}", "4"),
    ],
)
def test_last_boxed(text: str, content: str | None) -> None:
    assert last_boxed(text) == content


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("The answer is 5.", None),  # math-verify alone takes the bare 5
        ("The answer is $\\boxed{5}$.\n\nSo the final answer is $\\boxed{}$", None),  # no fallback to \boxed{5}
        ("\\boxed{5} then \\boxed{   }", None),
        ("<think>\\boxed{5}</think>", None),
        ("<think>\\boxed{4}</think> so \\boxed{5}", "5"),
        ("\\boxed{5}<think>\\boxed{4}", "5"),  # after an unclosed <think> nothing counts
        ("\\boxed{  -6 }", "-6"),
        ("To solve and give your final answer as the last \\boxed{...}, here's how:\n1. 2 - 3 = -1", None),  # echoed
        ("\\boxed{5} then \\boxed{ \\ldots }", None),  # the placeholder as the last box: no answer
        ("Answer as \\boxed{…}. So \\boxed{-1}", "-1"),
    ],
)
def test_final_answer(reply: str, answer: str | None) -> None:
    assert final_answer(reply) == answer


@pytest.mark.parametrize(
    ("gold", "answer", "correct"),
    [
        # fractions and decimals, exactly
        ("\\frac{1}{2}", "0.5", True),
        ("0.5", "\\dfrac{1}{2}", True),
        ("\\frac{1}{2}", "1/2", True),
        ("5", "5.0", True),
        ("1500", "1.5e3", True),
        ("0.00001", "1e-05", True),
        ("\\frac{1}{3}", "0.3333333333333333", False),  # a rounded decimal is not the fraction
        ("\\frac{1}{3}", "0.333", False),
        ("\\sqrt{2}", "1.4142135623730951", False),
        ("\\pi", "3.14159", False),
        ("3.14", "3.14", True),
        # repeating decimals, thousands, trailing period, Python's power
        ("\\frac{1}{3}", "0.\\overline{3}", True),
        ("\\frac{1}{6}", "0.1\\overline{6}", True),
        ("\\frac{1}{7}", "0.\\overline{142857}", True),
        ("\\frac{1}{3}", "0.\\overline{33}", True),
        ("\\frac{1}{3}", "0.\\overline{4}", False),
        ("12345", "12\\,345", True),
        ("1234567", "1\\,234\\,567", True),
        ("1234567", "1{,}234{,}567", True),
        ("12345.5", "12,345.5", True),
        ("\\{1, 234.5\\}", "\\{234.5, 1\\}", True),  # a comma and a space: a list, not thousands
        ("5", "5.", True),
        ("x^2", "x**2", True),
        # LaTeX forms
        ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}", True),
        ("x^2+2x+1", "(x+1)^2", True),
        ("\\dfrac{54}{275}", "54/275", True),
        ("$\\dfrac{54}{275}$", "\\frac{54}{275}", True),
        ("\\boxed{7}", "7", True),
        ("x^{0.5}", "\\sqrt{x}", True),
        ("-4", "4", False),
        # intervals, sets, tuples, several answers
        ("(-\\infty, 3]", "(-\\infty,3]", True),
        ("[1,2)", "[1,2]", False),
        ("\\{1,2\\}", "\\{2,1\\}", True),
        ("\\{1,2\\}", "(1,2)", False),
        ("(1,2)", "\\{1,2\\}", False),
        ("\\{1,2\\}", "[1,2]", False),
        ("1, 2", "2, 1", True),
        ("1, 2", "1, 3", False),
        ("\\{0.5, 0.25\\}", "\\{\\frac14, \\frac12\\}", True),
        # units
        ("5 m", "5 cm", False),
        ("5 \\text{ m}", "5\\,\\mathrm{cm}", False),
        ("5 m", "5\\text{ m}", True),
        ("2", "2 \\text{ apples}", True),  # a unit on one side only is math-verify's call
    ],
)
def test_equivalent_forms(gold: str, answer: str, correct: bool) -> None:
    grade = grade_answer(gold, answer)
    assert grade.correct is correct, grade


def test_math_verify_alone_gets_the_cases_above_wrong() -> None:
    """Why the normalisation exists: math-verify (gold first) errs on each pair the tests above grade right."""
    latex = [LatexExtractionConfig(boxed_match_priority=0)]

    def alone(gold: str, answer: str) -> bool:
        return verify(parse(f"\\boxed{{{gold}}}", latex), parse(answer))

    assert alone("5", "The answer is 5")
    assert alone("5", "The answer is $\\boxed{5}$.\n\nSo the final answer is $\\boxed{}$")
    assert alone("5 m", "\\boxed{5 cm}") and alone("\\{1,2\\}", "\\boxed{(1,2)}")
    assert alone("\\frac{1}{3}", "\\boxed{0.3333333333333333}")
    assert not alone("\\frac{1}{3}", "\\boxed{0.\\overline{3}}")
    assert not alone("12345", "\\boxed{12\\,345}") and not alone("5", "\\boxed{5.}")


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("5", "no_answer"),
        ("\\boxed{5} \\boxed{}", "no_answer"),
        ("\\boxed{5 cm}", "unit_mismatch"),
        ("\\boxed{" + "9" * (MAX_GRADED_CHARS + 1) + "}", "too_long"),
        ("\\boxed{5 m}", "equal"),
    ],
)
def test_grade_response_reasons(reply: str, reason: str) -> None:
    grade = grade_response("5 m", reply)
    assert grade.reason == reason and grade.correct is (reason == "equal")


def test_normalise_rewrites_decimals_as_exact_fractions() -> None:
    assert normalise("0.\\overline{3}") == "{\\frac{1}{3}}"
    assert normalise("$2.50.$") == "{\\frac{5}{2}}"
    assert normalise("1\\,000 + 0.25") == "1000 + {\\frac{1}{4}}"
    assert normalise("x**2 + 3") == "x^2 + 3"
    assert normalise("1e999999") == "1e999999"  # exponents past 3 digits are left alone, never computed here


@pytest.fixture(scope="module")
def tight_pool():
    """A pool for calls with a deadline (0.5 s) shorter than math-verify's own timeouts (2 s): overruns are killed."""
    pool = GradingPool(PoolSettings(workers=1, verify_timeout_s=2))
    yield pool
    pool.close()


def test_a_power_tower_grades_wrong_within_the_deadline_and_the_pool_recovers() -> None:
    # math-verify's own timeouts (30 s) far above the deadline (0.5 s): the time taken tells which one ended the call,
    # with room for a loaded machine (it was 2.9 s once with four training runs beside the suite on two cores)
    pool = GradingPool(PoolSettings(workers=1, verify_timeout_s=30))
    try:
        started = time.monotonic()
        grade = grade_response("5", f"\\boxed{{{TOWER}}}", deadline_s=0.5, pool=pool)
        assert (grade.correct, grade.reason) == (False, "timeout")
        assert time.monotonic() - started < 10  # the deadline and the kill, never math-verify's 30 s
        assert pool.killed == 1 and pool.workers == 0
        again = time.monotonic()
        assert grade_answer("5", TOWER, deadline_s=0.5, pool=pool).reason == "timeout"  # cached: the same verdict
        assert time.monotonic() - again < 0.1 and pool.killed == 1
        assert grade_answer("\\frac{1}{2}", "\\frac{2}{4}", deadline_s=5.0, pool=pool).correct  # a new worker
        assert pool.workers == 1
    finally:
        pool.close()


def test_grading_works_off_the_main_thread() -> None:
    """math-verify's own timeouts need the main thread; through the pool any thread grades."""
    with ThreadPoolExecutor(1) as thread:
        direct = thread.submit(parse, "$1$", parsing_timeout=1)
        with pytest.raises(ValueError, match="threaded environment"):
            direct.result()
    pairs = [("\\frac{1}{2}", f"\\frac{{{n}}}{{{2 * n}}}", True) for n in range(1, 7)]
    pairs += [("\\frac{1}{2}", f"\\frac{{{n}}}{{{2 * n + 1}}}", False) for n in range(1, 7)]
    with ThreadPoolExecutor(6) as threads:
        grades = list(threads.map(lambda pair: grade_answer(pair[0], pair[1]), pairs))
    assert [g.correct for g in grades] == [correct for _, _, correct in pairs]


@pytest.mark.parametrize(
    "answer",
    ["\ud800", "\\frac{\udfff}{2}", "{" * 400 + "1" + "}" * 400, "\\frac{" * 200, "x" * MAX_GRADED_CHARS, "é🙂" * 300],
)
def test_hostile_answers_grade_wrong_in_bounded_time(answer: str, tight_pool: GradingPool) -> None:
    started = time.monotonic()
    grade = grade_answer("\\frac{1}{2}", answer, deadline_s=0.5, pool=tight_pool)
    assert not grade.correct and time.monotonic() - started < 0.5 + 30  # the deadline, plus a worker's start


def test_pool_settings_and_a_worker_that_cannot_start() -> None:
    with pytest.raises(ValueError, match="workers"):
        PoolSettings(workers=0)
    with pytest.raises(ValueError, match="verify_timeout_s"):
        PoolSettings(verify_timeout_s=True)
    starved = GradingPool(PoolSettings(memory_mb=1, start_timeout_s=30))  # too little memory to import sympy
    with pytest.raises(RuntimeError, match="did not start"):
        starved.verify("\\boxed{1}", "\\boxed{1}", 1.0)
    assert starved.workers == 0
    starved.close()
    with pytest.raises(RuntimeError, match="closed"):
        starved.verify("\\boxed{1}", "\\boxed{2}", 1.0)


@pytest.mark.parametrize(
    "answer",
    [
        "\\frac{3}{4",  # an unclosed brace: math-verify reads 3/4
        "\\frac{3}{4}}",  # a stray closing brace
        "\\frac{3}{4}}{",
        "}\\frac{3}{4}{",  # as many braces, in the wrong order
        "\\boxed{\\frac{3}{4}",  # an unclosed box inside the answer
        "\\left(\\frac{3}{4}",  # \left without \right
        "\\frac{3}{4}\\right)",  # \right without \left
        "\\left(\\frac{3}{4}\\right)\\right)",
        "\\frac{3}{4}^",  # dangling scripts
        "\\frac{3}{4}_",
        "\\frac{3}{4}^{}",
        "\\frac{3}{4}^{ }",
        "$\\frac{3}{4}",  # unmatched math delimiters
        "\\frac{3}{4}$",
        "$\\frac{3}{4}$$",
        "\\(\\frac{3}{4}",
        "\\frac{3}{4}\\]",
        "\\frac{3}{4}\\",  # a lone backslash at the end
        "(\\frac{3}{4}",  # brackets that never close
        "\\frac{3}{4})",
        "\\begin{matrix}\\frac{3}{4}",  # an environment that never ends
        "\\frac{3}{4}\\end{matrix}",
        "\\begin{matrix}\\frac{3}{4}\\end{pmatrix}",
        "\\{\\frac{3}{4}",  # a set brace that never closes
    ],
)
def test_malformed_latex_is_never_repaired_into_the_gold(answer: str) -> None:
    grade = grade_answer("\\frac{3}{4}", answer)
    assert (grade.correct, grade.reason) == (False, "malformed"), grade


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("\\frac{3}{4}", "\\frac34"),  # LaTeX's one-token arguments are well formed
        ("\\frac{3}{4}", "\\frac{3}4"),
        ("\\sqrt{2}", "\\sqrt2"),
        ("(x+1)^2", "\\left(x+1\\right)^2"),
        ("\\{1,2\\}", "\\left\\{1,2\\right\\}"),  # \left\{ is a delimiter, not a group of its own
        ("[1,2)", "\\left[1,2\\right)"),
        ("(-\\infty, 3]", "(-\\infty,3]"),  # an interval mixes its brackets
        ("\\frac{1}{2}", "\\left.\\frac{1}{2}\\right."),
        ("x_1", "x_{1}"),
        ("5", "$5$"),
        ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ],
)
def test_well_formed_latex_still_grades_equal(gold: str, answer: str) -> None:
    grade = grade_answer(gold, answer)
    assert grade.correct, grade


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("i", "\\sqrt{-1}"),
        ("\\sqrt{-1}", "i"),
        ("-1", "i^2"),
        ("i^2", "-1"),
        ("1", "i^4"),
        ("2i", "\\sqrt{-4}"),
        ("1+i", "\\frac{2}{1-i}"),
        ("3+4i", "(2+i)^2"),
        ("e^{i\\pi}", "-1"),
        ("\\mathrm{i}", "\\sqrt{-1}"),
        ("\\{i,-i\\}", "\\{\\sqrt{-1},-\\sqrt{-1}\\}"),
    ],
)
def test_i_is_the_imaginary_unit_when_it_is_the_only_letter(gold: str, answer: str) -> None:
    grade = grade_answer(gold, answer)
    assert grade.correct, grade


@pytest.mark.parametrize(
    ("gold", "answer"),
    [
        ("i", "1"),
        ("i", "-i"),
        ("i", "-\\sqrt{-1}"),
        ("1", "i^2"),
        ("i^2", "1"),
        ("-1", "i"),
        ("2", "\\sqrt{-4}"),
        ("i", "j"),
        ("i+j", "\\sqrt{-1}+j"),  # another letter: `i` may be an index, so it stays a symbol
        ("x", "\\sqrt{-1}"),
    ],
)
def test_complex_values_that_differ_stay_different(gold: str, answer: str) -> None:
    grade = grade_answer(gold, answer)
    assert not grade.correct, grade
