"""The compact-mode table's figures (research/learning/README.md), from data/runs.jsonl; also the paired-gain rows
the other learning studies' figures share."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from research.records import RUNS_FILE, RunCurves, read_runs, select
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
METHOD_NAMES = {
    "mas_no_rl": "team, no RL (the warm start)",
    "single_grpo": "single agent + GRPO",
    "at_grpo_shared": "AT-GRPO, shared model",
    "at_grpo_per_role": "AT-GRPO, one model per role",
    "mas_grpo_task": "team, one group per task",
}


def before_after(run: RunCurves, mode: str, step: int | None = None) -> tuple[float, float]:
    """A run's reading before RL (step 0) and at `step` (default: its last reading)."""
    return run.at(mode, 0), run.at(mode, run.last(mode)[0] if step is None else step)


def mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values)


def gain_summary(runs: list[RunCurves], mode: str, step: int | None = None) -> dict[str, Any]:
    """The paired gains (reading at `step` minus the same run's step 0) over runs, as `difference_summary`."""
    return difference_summary([after - before for before, after in (before_after(r, mode, step) for r in runs)])


def per_seed_text(summary: dict[str, Any]) -> str:
    return " ".join(number(d, signed=True) for d in summary["per_seed"])


def gain_rows(runs: list[RunCurves], methods: Iterable[str], step: int | None = None) -> list[list[str]]:
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
    runs = read_runs(DATA / RUNS_FILE)
    warm = select(runs, "mas_no_rl")
    single = select(runs, "single_grpo")
    warm_line = (
        f"Warm starts before RL (greedy, mean of {len(warm)} seeds): team {number(mean(r.at('greedy', 0) for r in warm))}, "
        f"single agent {number(mean(r.at('greedy', 0) for r in single))}."
    )
    methods = ["single_grpo", "at_grpo_shared", "at_grpo_per_role", "mas_grpo_task"]
    shared = select(runs, "at_grpo_shared")
    return {
        "gains": markdown_table([GAIN_HEADER, *gain_rows(runs, methods)]) + "\n\n" + warm_line,
        "headline": "AT-GRPO (shared model), greedy gain after 150 steps: "
        + summary_text(gain_summary(shared, "greedy"))
        + f", n = {len(shared)} seeds",
    }
