"""The compact run record every learning study keeps in `data/runs.jsonl`: its one writer and its one reader.

One JSON object a line, one line a run:

    {"env": "plan_path", "method": "at_grpo_shared", "seed": 0,
     "greedy": [[0, 0.578125], [150, 0.640625]], "sampled": [[0, 0.546875], [150, 0.59375]], ...labels}

`greedy` and `sampled` are the run's held-out success at each evaluation, `[step, success]` in increasing steps
(`sampled` may be empty: a run evaluated greedily only). Every other key is a label the study keeps with the run, as
the harness writes it (`command`, `date`, `machine`, `keys`: the run's settings, `env_options`, `wall_s`,
`stopped_at`) or as a study names its runs (`design`, `campaign`, ...). The harness (`research/harness.py`) writes
`OUT/runs.jsonl`; copied into `research/<study>/data/`, `python -m research.figures` recomputes the page from it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUNS_FILE = "runs.jsonl"
MODES = ("greedy", "sampled")
Reading = tuple[int, float]  # (step, held-out success)


@dataclass(frozen=True)
class RunCurves:
    """One run's held-out success at each evaluation, greedy and sampled, and the labels its study keeps with it."""

    env: str
    method: str
    seed: int
    greedy: tuple[Reading, ...]
    sampled: tuple[Reading, ...] = ()
    labels: Mapping[str, Any] = field(default_factory=dict)

    def curve(self, mode: str) -> tuple[Reading, ...]:
        """The `greedy` or `sampled` readings."""
        if mode not in MODES:
            raise ValueError(f"a reading is one of {MODES}, not {mode!r}")
        return getattr(self, mode)

    def at(self, mode: str, step: int) -> float:
        """The reading at `step`; fails naming the run if it has none there."""
        for at, success in self.curve(mode):
            if at == step:
                return success
        raise KeyError(f"{self.name()} has no {mode} reading at step {step}")

    def last(self, mode: str) -> Reading:
        """The last (step, reading); fails naming the run if it has none."""
        if not self.curve(mode):
            raise KeyError(f"{self.name()} has no {mode} reading")
        return self.curve(mode)[-1]

    def name(self) -> str:
        shown = " ".join(f"{key}={value}" for key, value in self.labels.items() if isinstance(value, (str, int)))
        return f"{self.env} {self.method} seed {self.seed}" + (f" ({shown})" if shown else "")


def select(runs: Iterable[RunCurves], method: str, **labels: Any) -> list[RunCurves]:
    """The runs of one method whose env, seed or labels equal `labels`, sorted by seed."""

    def matches(run: RunCurves) -> bool:
        fields = {"env": run.env, "seed": run.seed}
        return all(fields.get(key, run.labels.get(key)) == value for key, value in labels.items())

    return sorted((run for run in runs if run.method == method and matches(run)), key=lambda run: run.seed)


def run_line(run: RunCurves) -> str:
    """The run as its one JSON line (no newline)."""
    core = {"env": run.env, "method": run.method, "seed": run.seed}
    curves = {mode: [list(reading) for reading in run.curve(mode)] for mode in MODES}
    return json.dumps(core | curves | dict(run.labels))


def write_runs(path: Path, runs: Iterable[RunCurves]) -> None:
    """Write `runs`, one line each."""
    path.write_text("".join(run_line(run) + "\n" for run in runs))


def read_runs(path: Path) -> list[RunCurves]:
    """Every run of a runs.jsonl file, in its order; a malformed line fails naming the file and the line."""
    runs = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            runs.append(parse_run(json.loads(line)))
        except (ValueError, TypeError) as exc:  # json's own errors are ValueErrors
            raise ValueError(f"{path}, line {number}: {exc}") from None
    return runs


def parse_run(row: Any) -> RunCurves:
    """One line's object as a run; fails naming the key that is missing or of the wrong type."""
    if not isinstance(row, dict):
        raise TypeError(f"a run is a JSON object, not {type(row).__name__}")
    for key, kind in (("env", str), ("method", str), ("seed", int), ("greedy", list)):
        if key not in row:
            raise ValueError(f"missing key {key!r}")
        if not isinstance(row[key], kind) or isinstance(row[key], bool):
            raise TypeError(f"{key!r} is {type(row[key]).__name__}, not {kind.__name__}")
    labels = {key: value for key, value in row.items() if key not in ("env", "method", "seed", *MODES)}
    curves = {mode: parse_curve(mode, row.get(mode, [])) for mode in MODES}
    return RunCurves(row["env"], row["method"], row["seed"], curves["greedy"], curves["sampled"], labels)


def parse_curve(mode: str, readings: Any) -> tuple[Reading, ...]:
    """A curve's [step, success] pairs, steps increasing; fails naming the curve and the pair."""
    if not isinstance(readings, list):
        raise TypeError(f"{mode!r} is {type(readings).__name__}, not a list of [step, success]")
    parsed: list[Reading] = []
    for index, pair in enumerate(readings):
        valid = isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int
        if not valid or type(pair[1]) not in (int, float) or not 0 <= pair[1] <= 1:
            raise ValueError(f"{mode!r}[{index}] is {pair!r}, not [step, success in 0..1]")
        if parsed and pair[0] <= parsed[-1][0]:
            raise ValueError(f"{mode!r}[{index}]: step {pair[0]} does not follow step {parsed[-1][0]}")
        parsed.append((pair[0], float(pair[1])))
    return tuple(parsed)

