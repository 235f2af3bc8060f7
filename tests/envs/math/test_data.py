"""Math problem files: each public form read from small parquet/jsonl files written here; malformed rows name the
file and the row."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verl_mas_envs.math.data import MathProblem, detect_form, load_problems

DAPO_PROMPT = (
    "Solve the following math problem step by step. The last line of your response should be of the form Answer: "
    "$Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_polaris_and_aime_25_forms(tmp_path: Path) -> None:
    polaris = write_jsonl(
        tmp_path / "polaris.jsonl",
        [{"problem": " What is $1+1$? ", "answer": "2", "difficulty": "1/8"}, {"problem": "Half of 1?", "answer": 0.5}],
    )
    assert load_problems(polaris) == (MathProblem("What is $1+1$?", "2"), MathProblem("Half of 1?", "0.5"))
    opencompass = write_parquet(tmp_path / "aime25.parquet", [{"question": "Find $n$.", "answer": "70"}])
    assert load_problems(opencompass, "aime") == (MathProblem("Find $n$.", "70"),)


def test_aime_24_form_checks_its_answers(tmp_path: Path) -> None:
    rows = [
        {"ID": "2024-I-1", "Problem": "Find $m+n$.", "Solution": "...", "Answer": 204},
        {"ID": "2024-I-2", "Problem": "Find $xy$.", "Solution": "...", "Answer": "025"},
    ]
    path = write_jsonl(tmp_path / "aime24.jsonl", rows)  # mixed answer types: as some copies of AIME 24 hold them
    assert load_problems(path, "aime") == (MathProblem("Find $m+n$.", "204"), MathProblem("Find $xy$.", "25"))
    assert load_problems(path)[1].answer == "025"  # as "problem_answer" the text is kept
    bad = write_jsonl(tmp_path / "bad.jsonl", [rows[0], {"Problem": "Find it.", "Answer": "\\frac{1}{2}"}])
    with pytest.raises(ValueError, match=r"bad\.jsonl: row 1: an AIME answer is an integer"):
        load_problems(bad, "aime")


def test_olympiadbench_final_answer_as_list_and_as_text(tmp_path: Path) -> None:
    rows = [
        {"id": 1, "question": "Find $x$.", "final_answer": ["$\\frac{1}{2}$"], "context": None},
        {"id": 2, "question": "Find both roots.", "final_answer": ["$1$", "$-3$"], "context": "Let $f(x)=x^2+2x-3$."},
    ]
    listed = load_problems(write_parquet(tmp_path / "ob.parquet", rows))
    assert listed == (
        MathProblem("Find $x$.", "\\frac{1}{2}"),
        MathProblem("Let $f(x)=x^2+2x-3$.\n\nFind both roots.", "1, -3"),
    )
    as_text = [{**row, "final_answer": repr(row["final_answer"])} for row in rows]  # the list stored as text
    assert load_problems(write_jsonl(tmp_path / "ob_text.jsonl", as_text)) == listed
    as_json = [{**row, "final_answer": json.dumps(row["final_answer"])} for row in rows]
    assert load_problems(write_jsonl(tmp_path / "ob_json.jsonl", as_json)) == listed
    single = write_jsonl(tmp_path / "ob_single.jsonl", [{"question": "Q?", "final_answer": "$7$"},
                                                         {"question": "R?", "final_answer": "[2, 3]"}])  # fmt: skip
    assert load_problems(single) == (MathProblem("Q?", "7"), MathProblem("R?", "2, 3"))


@pytest.mark.parametrize(
    ("final_answer", "message"),
    [
        ("['$1$', ", "final_answer is not a list written as text"),
        ("[]", "non-empty list"),
        ("[__import__('os').getcwd()]", "final_answer is not a list written as text"),  # read, never run
        ("['$$']", "empty answer"),
        ([None], "each final_answer must be non-empty text"),
    ],
)
def test_olympiadbench_malformed_answers_name_the_row(tmp_path: Path, final_answer: object, message: str) -> None:
    rows = [{"question": "Q?", "final_answer": "[1]"}, {"question": "R?", "final_answer": final_answer}]
    path = write_jsonl(tmp_path / "ob.jsonl", rows)
    with pytest.raises(ValueError, match=rf"ob\.jsonl: row 1: .*{message}"):
        load_problems(path)


def test_dapo_form_drops_its_answer_line_instructions(tmp_path: Path) -> None:
    rows = [
        {
            "data_source": "math_dapo",
            "prompt": [{"role": "user", "content": DAPO_PROMPT.format(problem="Compute $2^{10}$.")}],
            "ability": "MATH",
            "reward_model": {"ground_truth": "1024", "style": "rule-lighteval/MATH_v2"},
            "extra_info": {"index": "a"},
        },
        {"prompt": "Plain text problem.", "reward_model": {"ground_truth": "3"}},
    ]
    dapo = write_parquet(tmp_path / "dapo.parquet", rows[:1])
    assert load_problems(dapo) == (MathProblem("Compute $2^{10}$.", "1024"),)
    plain = load_problems(write_jsonl(tmp_path / "plain.jsonl", rows))  # a prompt may also be plain text
    assert plain[1] == MathProblem("Plain text problem.", "3")
    no_truth = write_jsonl(tmp_path / "dapo.jsonl", [rows[0], {"prompt": "Q", "reward_model": {"style": "rule"}}])
    with pytest.raises(ValueError, match=r"dapo\.jsonl: row 1: reward_model\.ground_truth must be non-empty text"):
        load_problems(no_truth)
    no_user = write_jsonl(tmp_path / "sys.jsonl", [{"prompt": [{"role": "system", "content": "x"}],
                                                    "reward_model": {"ground_truth": "1"}}])  # fmt: skip
    with pytest.raises(ValueError, match=r"sys\.jsonl: row 0: prompt has no user message"):
        load_problems(no_user)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"problem": "Q", "answer": "1"}, {"problem": "", "answer": "1"}], r"row 1: problem must be non-empty"),
        ([{"problem": "Q", "answer": "1"}, {"problem": "Q"}], r"row 1: missing answer / Answer"),
        ([{"problem": "Q", "answer": "1"}, {"problem": "Q", "answer": True}], r"row 1: answer must be"),
        ([{"problem": "Q", "answer": "1"}, {"problem": "Q", "answer": float("inf")}], r"row 1: answer must be finite"),
        ([{"problem": "Q", "answer": "1"}, [1, 2]], r"row 1: row is list"),
        ([{"text": "Q", "label": "1"}], r"row 0: cannot tell the form"),
    ],
)
def test_malformed_rows_name_the_file_and_row(tmp_path: Path, rows: list, message: str) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text("".join(json.dumps(row, allow_nan=True) + "\n" for row in rows))
    with pytest.raises(ValueError, match=rf"set\.jsonl: {message}"):
        load_problems(path)


def test_files_that_hold_no_problems(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such dataset file"):
        load_problems(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="no rows"):
        load_problems(write_jsonl(tmp_path / "empty.jsonl", []))
    with pytest.raises(ValueError, match="unknown math data form"):
        load_problems(write_jsonl(tmp_path / "one.jsonl", [{"problem": "Q", "answer": "1"}]), "gsm8k")


def test_detect_form() -> None:
    assert detect_form({"question": "Q", "final_answer": ["1"]}, "r") == "olympiadbench"
    assert detect_form({"prompt": [], "reward_model": {}}, "r") == "prompt_ground_truth"
    assert detect_form({"Problem": "Q", "Answer": 1}, "r") == "problem_answer"
