"""research.evaluations: the code-mode studies' evaluation rows, one run's rows by step, and their text."""

import pytest

from research.evaluations import each_text, first_to_last, read_rows, run_rows

ROWS = [
    {"run": "a", "seed": 1, "step": 20, "greedy": 0.75, "invalid": 0.125},
    {"run": "a", "seed": 0, "step": 0, "greedy": 0.5, "invalid": 0.5},
    {"run": "a", "seed": 1, "step": 0, "greedy": 0.25, "invalid": 0.375},
    {"run": "b", "seed": 1, "step": 10, "greedy": 1.0, "invalid": 0.0},
    {"run": "a", "seed": 1, "step": 10, "greedy": 0.5, "invalid": 0.25},
]


def test_rows_are_read_in_the_files_order_skipping_blank_lines(tmp_path):
    path = tmp_path / "evals.jsonl"
    path.write_text('{"step": 10}\n\n  \n{"step": 0}\n')
    assert read_rows(path) == [{"step": 10}, {"step": 0}]


def test_one_runs_rows_are_those_matching_every_field_sorted_by_step():
    rows = run_rows(ROWS, run="a", seed=1)
    assert [row["step"] for row in rows] == [0, 10, 20]
    assert {row["greedy"] for row in rows} == {0.25, 0.5, 0.75}  # not run b's, not seed 0's


def test_a_run_with_no_rows_is_named():
    with pytest.raises(KeyError, match="no run run=b seed=0"):
        run_rows(ROWS, run="b", seed=0)


def test_the_texts_read_every_row_and_the_first_and_last():
    rows = run_rows(ROWS, run="a", seed=1)
    assert each_text(rows, "greedy") == "0.250 / 0.500 / 0.750"
    assert first_to_last(rows, "invalid") == "0.375 -> 0.125"
    assert first_to_last(rows, "invalid", ".2f") == "0.38 -> 0.12"  # round half to even: 0.375 -> 0.38, 0.125 -> 0.12
