"""The first verl-on-CPU comparison (research/verl_cpu/README.md), from data/results.json."""

from __future__ import annotations

import json
from pathlib import Path

from verl_mas.stats import markdown_table, number

DATA = Path(__file__).resolve().parent / "data"
TIMES = {
    "local": ("time/generation_s", None, "time/advantage_s", "time/update_s", "time/step_s"),
    "verl": ("timing_s/gen", "timing_s/old_log_prob", "timing_s/adv", "timing_s/update_actor", "timing_s/step"),
}


def binomial_se(success: float, boards: int) -> float:
    return (success * (1 - success) / boards) ** 0.5


def tables() -> dict[str, str]:
    record = json.loads((DATA / "results.json").read_text())
    boards = record["boards"]
    lines = [["engine", "before", "after 20 steps", "change"]]
    for engine in ("local", "verl"):
        before, after = record[engine]["before"], record[engine]["after"]
        lines.append([engine, f"{number(before)} ± {number(binomial_se(before, boards))}",
                      f"{number(after)} ± {number(binomial_se(after, boards))}", number(after - before, signed=True)])
    times = [["engine", "generation", "old log-prob", "advantage", "update", "step"]]
    for engine, keys in TIMES.items():
        times.append([engine, *("(in update)" if k is None else f"{record[engine]['times'][k]:.3f}" for k in keys)])
    return {
        "success": markdown_table(lines) + f"\n\n± one binomial standard error over the {boards} boards.",
        "times": markdown_table(times),
    }
