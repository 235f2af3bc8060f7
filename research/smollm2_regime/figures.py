"""The regime study's figures (research/smollm2_regime/README.md), from data/runs.jsonl as research.smollm2_regime
writes it: per arm, held-out success greedy, sampled at 1 and at 0.5, with a binomial standard error, and the rule."""

from __future__ import annotations

import json
import math
from pathlib import Path

from research.smollm2_regime.regime import ARMS, DESIGNS, LOW_TEMPERATURE
from verl_mas.stats import markdown_table, number

DATA = Path(__file__).resolve().parent / "data"
RUNS_FILE = "runs.jsonl"
BAND = (0.10, 0.60)  # the design's band for the team's greedy success


def records() -> list[dict]:
    lines = (DATA / RUNS_FILE).read_text().splitlines()
    by_arm = {record["arm"]: record for record in map(json.loads, lines)}
    return [by_arm[name] for name in ARMS if name in by_arm]  # the design's order


def reading(success: float, boards: int) -> str:
    return f"{number(success)} ({number(math.sqrt(success * (1 - success) / boards))})"


def arms_table() -> str:
    low = f"sampled_t{LOW_TEMPERATURE}"
    lines = [["arm", "tune", "greedy (SE)", "sampled at 1 (SE)", f"sampled at {LOW_TEMPERATURE} (SE)",
              "invalid moves: greedy / sampled", "wall, min"]]  # fmt: skip
    for r in records():
        # recorded without overrides when the preset's own tune was the arm's (regime.ARMS says which it was)
        tune = " ".join(r["overrides"]) or f"{' '.join(ARMS[r['arm']])} (the preset's then)"
        boards = r["eval_tasks"]
        lines.append([
            f"`{r['arm']}`", tune, reading(r["greedy"], boards), reading(r["sampled"], boards),
            reading(r[low], boards), f"{number(r['invalid_greedy'])} / {number(r['invalid_sampled'])}",
            f"{r['wall_s'] / 60:.0f}",
        ])  # fmt: skip
    boards = {r["eval_tasks"] for r in records()}
    return markdown_table(lines) + f"\n\nSeed 0, {', '.join(map(str, sorted(boards)))} evaluation boards per reading."


def choice_text(design: str) -> str:
    """The design's rule: its cheapest team arm (in the design's order) with greedy success inside the band."""
    done = [r for r in records() if r["arm"] in DESIGNS[design]]
    chosen = [r["arm"] for r in done if r["arm"].startswith("team_") and BAND[0] <= r["greedy"] <= BAND[1]]
    waiting = [name for name in DESIGNS[design] if name not in {r["arm"] for r in done}]
    if chosen:
        greedy = next(r["greedy"] for r in done if r["arm"] == chosen[0])
        return f"The {design} design's rule chooses `{chosen[0]}` (greedy {number(greedy)})."
    left = f"not run yet: {', '.join(f'`{name}`' for name in waiting)}." if waiting else "none is left to run."
    return (
        f"No arm of the {design} design run so far meets its rule (team greedy success in [{BAND[0]}, {BAND[1]}]); "
        f"{left}"
    )


def zero_shot_text(arm: str) -> str:
    zero = next((r for r in records() if r["arm"] == arm), None)
    if zero is None:
        return f"`{arm}` not run yet."
    return f"`{arm}`: greedy success {number(zero['greedy'])}, {number(zero['invalid_greedy'])} of its moves invalid."


def headline() -> str:
    return " ".join(
        [zero_shot_text("team_zero_shot"), choice_text("first"), zero_shot_text("team_zero_shot_example"),
         choice_text("second")]
    )  # fmt: skip


def tables() -> dict[str, str]:
    return {
        "arms": arms_table(),
        "choice": choice_text("first"),
        "choice_second": choice_text("second"),
        "headline": headline(),
    }
