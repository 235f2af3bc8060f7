"""The 500-1000-step runs' figures (research/learning_long/README.md), from data/runs.jsonl."""

from __future__ import annotations

from pathlib import Path

from research.learning.figures import GAIN_HEADER, METHOD_NAMES, gain_rows
from research.records import RUNS_FILE, RunCurves, read_runs, select
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
METHODS = ("at_grpo_shared", "single_grpo")


def curve_table(runs: list[RunCurves]) -> str:
    """Seed 0's 1000-step runs, every 100 steps."""
    steps = [step for step, _ in select(runs, "at_grpo_shared", seed=0)[0].greedy]
    lines = [["steps", *map(str, steps)]]
    for method in METHODS:
        run = select(runs, method, seed=0)[0]
        for mode in ("greedy", "sampled"):
            lines.append([f"{METHOD_NAMES[method]}, {mode}", *(number(run.at(mode, s)) for s in steps)])
    return markdown_table(lines)


def team_minus_single(runs: list[RunCurves], mode: str) -> dict:
    """Per seed, AT-GRPO's gain at step 500 minus the single agent's."""
    gains = {}
    for method in METHODS:
        gains[method] = [r.at(mode, 500) - r.at(mode, 0) for r in select(runs, method)]
    return difference_summary([a - b for a, b in zip(gains["at_grpo_shared"], gains["single_grpo"])])


def tables() -> dict[str, str]:
    runs = read_runs(DATA / RUNS_FILE)
    gains = markdown_table([GAIN_HEADER, *gain_rows(runs, METHODS, step=500)])
    difference = (
        "AT-GRPO's gain minus the single agent's, paired per seed: greedy "
        + summary_text(team_minus_single(runs, "greedy"))
        + ", sampled "
        + summary_text(team_minus_single(runs, "sampled"))
        + "."
    )
    shared = select(runs, "at_grpo_shared")
    greedy = difference_summary([r.at("greedy", 500) - r.at("greedy", 0) for r in shared])
    return {
        "seed0_curve": curve_table(runs),
        "gains_500": gains + "\n\n" + difference,
        "headline": f"AT-GRPO (shared model), greedy gain after 500 steps: {summary_text(greedy)}, n = {len(shared)} seeds",
    }
