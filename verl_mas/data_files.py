"""Rows of parquet and JSON-lines files, read with errors that name the file, the row and the line; and a text file
written atomically."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


class UnreadableFile(ValueError):
    """A file a run needs is missing, empty, truncated or not of its format; the message names it."""


def read_jsonl(path: Path) -> list[Any]:
    """The JSON value of each non-blank line of `path`, in order.

    Raises:
        UnreadableFile: a line is not JSON; the message names the file, the row and the line.
    """
    rows = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise UnreadableFile(f"{path}: row {len(rows)} (line {number}): not JSON: {error}") from error
    return rows


def load_rows(path: Path) -> list[Any]:
    """The raw rows of a parquet or jsonl file; a missing file, bad JSON line or unknown format names the file."""
    if not path.is_file():
        raise ValueError(f"{path}: no such dataset file")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # here: the CLI imports this module via local.files; pyarrow is slow

        return pq.read_table(path).to_pylist()
    if path.suffix == ".jsonl":
        return read_jsonl(path)
    raise ValueError(f"{path}: unknown dataset format {path.suffix!r}; expected .parquet or .jsonl")


def rows_in_form(
    path: str | Path, form: str, forms: Sequence[str], detect: Callable[[Any, str], str], label: str
) -> tuple[list[Any], str]:
    """The rows of a problem file and their form: `form`, or for "auto" the one `detect` reads from row 0; an
    unknown form or an empty file is a ValueError naming it."""
    if form not in forms:
        raise ValueError(f"unknown {label} data form {form!r}; forms are {tuple(forms)}")
    rows = load_rows(Path(path))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows, detect(rows[0], f"{path}: row 0") if form == "auto" else form


def write_text_atomic(path: Path, text: str) -> None:
    """Write through a temp file renamed into place: a reader (or a crash) never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
