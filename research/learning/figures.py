"""The compact-mode table's figures (research/learning/README.md), from data/runs.json; also the run-record readers
the other learning studies' figures share."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from research.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
METHOD_NAMES = {
    "mas_no_rl": "team, no RL (the warm start)",
    "single_grpo": "single agent + GRPO",
    "at_grpo_shared": "AT-GRPO, shared model",
    "at_grpo_per_role": "AT-GRPO, one model per role",
    "mas_grpo_task": "team, plain GRPO groups per task",
}


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The `runs` list of a study's runs.json."""
    return json.loads(path.read_text())["runs"]


def at_step(run: dict[str, Any], mode: str, step: int) -> float:
    """A run's held-out success (`greedy` or `sampled`) at `step`; fails naming the run if it has no such reading."""
    for at, value in run[mode]:
        if at == step:
            return value
    raise KeyError(f"{run['method']} seed {run['seed']} has no {mode} reading at step {step}")


def before_after(run: dict[str, Any], mode: str, step: int | None = None) -> tuple[float, float]:
    """A run's reading before RL (step 0) and at `step` (default: its last reading)."""
    last = run[mode][-1][0] if step is None else step
    return at_step(run, mode, 0), at_step(run, mode, last)


def select(runs: Iterable[dict[str, Any]], method: str, **match: Any) -> list[dict[str, Any]]:
    """The runs of one method (and any other field equal to `match`), sorted by seed."""
    chosen = [r for r in runs if r["method"] == method and all(r.get(k) == v for k, v in match.items())]
    return sorted(chosen, key=lambda r: r["seed"])


def mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values)


def gain_summary(runs: list[dict[str, Any]], mode: str, step: int | None = None) -> dict[str, Any]:
    """The paired gains (reading at `step` minus the same run's step 0) over runs, as `difference_summary`."""
    return difference_summary([after - before for before, after in (before_after(r, mode, step) for r in runs)])


def per_seed_text(summary: dict[str, Any]) -> str:
    return " ".join(number(d, signed=True) for d in summary["per_seed"])


def gain_rows(runs: list[dict[str, Any]], methods: Iterable[str], step: int | None = None) -> list[list[str]]:
    """One row per method: seeds, greedy before -> after, its paired gain, the same sampled."""
    rows = []
    for method in methods:
        chosen = select(runs, method)
        row = [METHOD_NAMES.get(method, method), str(len(chosen))]
        for mode in ("greedy", "sampled"):
            pairs = [before_after(r, mode, step) for r in chosen]
            summary = gain_summary(chosen, mode, step)
            row += [f"{number(mean(b for b, _ in pairs))} -> {number(mean(a for _, a in pairs))}", summary_text(summary)]
        row.insert(4, per_seed_text(gain_summary(chosen, "greedy", step)))
        rows.append(row)
    return rows


GAIN_HEADER = [
    "method",
    "seeds",
    "greedy before -> after",
    "greedy gain: mean (SE) [95%]",
    "greedy gain per seed",
    "sampled before -> after",
    "sampled gain: mean (SE) [95%]",
]


def tables() -> dict[str, str]:
    runs = read_runs(DATA / "runs.json")
    warm = select(runs, "mas_no_rl")
    single = select(runs, "single_grpo")
    warm_line = (
        f"Warm starts before RL (greedy, mean of {len(warm)} seeds): team {number(mean(at_step(r, 'greedy', 0) for r in warm))}, "
        f"single agent {number(mean(at_step(r, 'greedy', 0) for r in single))}."
    )
    methods = ["single_grpo", "at_grpo_shared", "at_grpo_per_role", "mas_grpo_task"]
    shared = select(runs, "at_grpo_shared")
    return {
        "gains": markdown_table([GAIN_HEADER, *gain_rows(runs, methods)]) + "\n\n" + warm_line,
        "headline": "AT-GRPO (shared model), greedy gain after 150 steps: "
        + summary_text(gain_summary(shared, "greedy"))
        + f", n = {len(shared)} seeds",
    }
