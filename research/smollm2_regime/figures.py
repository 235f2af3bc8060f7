"""The regime study's figures (research/smollm2_regime/README.md), from data/runs.jsonl as research.smollm2_regime
writes it: per arm, held-out success greedy, sampled at 1 and at 0.5, with a binomial standard error, and the rule."""

from __future__ import annotations

import json
import math
from pathlib import Path

from research.smollm2_regime.regime import ARMS, DESIGNS, LOW_TEMPERATURE, copy_baseline
from verl_mas.stats import markdown_table, number

DATA = Path(__file__).resolve().parent / "data"
RUNS_FILE = "runs.jsonl"
BAND = (0.10, 0.60)  # the design's band for the team's greedy success
COPIED_ARM = "team_zero_shot_example"  # the copy baseline's boards and prompts: every second-design arm's


def records() -> list[dict]:
    lines = (DATA / RUNS_FILE).read_text().splitlines()
    by_arm = {record["arm"]: record for record in map(json.loads, lines)}
    return [by_arm[name] for name in ARMS if name in by_arm]  # the design's order


def reading(success: float, boards: int) -> str:
    return f"{number(success)} ({number(math.sqrt(success * (1 - success) / boards))})"


def arms_table(design: str) -> str:
    low = f"sampled_t{LOW_TEMPERATURE}"
    lines = [["arm", "tune", "greedy (SE)", "sampled at 1 (SE)", f"sampled at {LOW_TEMPERATURE} (SE)",
              "invalid moves: greedy / sampled", "wall, min"]]  # fmt: skip
    done = [r for r in records() if r["arm"] in DESIGNS[design]]
    if not done:
        return "No arm of this design has finished yet."
    for r in done:
        # recorded without overrides when the preset's own tune was the arm's (regime.ARMS says which it was)
        tune = " ".join(r["overrides"]) or f"{' '.join(ARMS[r['arm']])} (the preset's then)"
        boards = r["eval_tasks"]
        lines.append([
            f"`{r['arm']}`", tune, reading(r["greedy"], boards), reading(r["sampled"], boards),
            reading(r[low], boards), f"{number(r['invalid_greedy'])} / {number(r['invalid_sampled'])}",
            f"{r['wall_s'] / 60:.0f}",
        ])  # fmt: skip
    boards = {r["eval_tasks"] for r in done}
    return markdown_table(lines) + f"\n\nSeed 0, {', '.join(map(str, sorted(boards)))} evaluation boards per reading."


def copy_text() -> str:
    copied = copy_baseline(COPIED_ARM)
    return (
        f"Copying the worked example's reply every turn reads greedy success {number(copied['success'])} on the same "
        f"boards, {number(copied['invalid_move_share'])} of its moves invalid."
    )


def choice_text(design: str) -> str:
    """The design's rule: its cheapest team arm (in the design's order) with greedy success inside the band (and, in
    the second design, above what copying the worked example reads)."""
    floor = copy_baseline(COPIED_ARM)["success"] if design == "second" else -1.0
    done = [r for r in records() if r["arm"] in DESIGNS[design]]
    chosen = [
        r["arm"]
        for r in done
        if r["arm"].startswith("team_") and BAND[0] <= r["greedy"] <= BAND[1] and r["greedy"] > floor
    ]
    waiting = [name for name in DESIGNS[design] if name not in {r["arm"] for r in done}]
    if chosen:
        greedy = next(r["greedy"] for r in done if r["arm"] == chosen[0])
        return f"The {design} design's rule chooses `{chosen[0]}` (greedy {number(greedy)})."
    left = f"not run yet: {', '.join(f'`{name}`' for name in waiting)}." if waiting else "none is left to run."
    above = f" and above copying's {number(floor)}" if design == "second" else ""
    return (
        f"No arm of the {design} design run so far meets its rule (team greedy success in [{BAND[0]}, {BAND[1]}]"
        f"{above}); {left}"
    )


def zero_shot_text(arm: str) -> str:
    zero = next((r for r in records() if r["arm"] == arm), None)
    if zero is None:
        return ""
    return f"`{arm}`: greedy success {number(zero['greedy'])}, {number(zero['invalid_greedy'])} of its moves invalid. "


def headline() -> str:
    return (
        zero_shot_text("team_zero_shot") + choice_text("first") + " " + zero_shot_text("team_zero_shot_example")
        + choice_text("second")
    )  # fmt: skip


def tables() -> dict[str, str]:
    return {
        "arms": arms_table("first"),
        "choice": choice_text("first"),
        "arms_second": arms_table("second"),
        "copy_second": copy_text(),
        "choice_second": choice_text("second"),
        "headline": headline(),
    }
