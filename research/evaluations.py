"""The per-evaluation rows the code-mode studies keep (`data/evals.jsonl`): their reader, one run's rows, their text.

One JSON object a line, one line a (run, step): the fields that name the run (`seed` and, per study, `group` and
`run` or `warm_start` and `method`), its `step`, and its readings there (`greedy`, `sampled`, invalid shares...).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verl_mas.stats import number


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of a JSON-lines file, in its order (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_rows(rows: Sequence[dict[str, Any]], **run: Any) -> list[dict[str, Any]]:
    """The rows of the one run whose fields equal `run`, by step; fails naming the run when it has none."""
    matching = (row for row in rows if all(row[key] == value for key, value in run.items()))
    found = sorted(matching, key=lambda row: row["step"])
    if not found:
        raise KeyError(f"data/evals.jsonl has no run {' '.join(f'{key}={value}' for key, value in run.items())}")
    return found


def each_text(rows: Sequence[dict[str, Any]], key: str) -> str:
    """The `key` reading at every row, three decimals each: "0.984 / 0.992 / 1.000"."""
    return " / ".join(number(row[key]) for row in rows)


def first_to_last(rows: Sequence[dict[str, Any]], key: str, spec: str = ".3f") -> str:
    """The `key` reading at the first row and at the last, formatted by `spec`: "0.016 -> 0.008"."""
    return f"{rows[0][key]:{spec}} -> {rows[-1][key]:{spec}}"
