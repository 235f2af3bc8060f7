"""The arithmetic study's figures (research/smollm2_math/README.md), from data/regime.jsonl and data/runs.jsonl as
research.smollm2_math writes them: the regime's readings with the chance yardsticks and the rule, and the learning
runs' tables as the Plan-Path learning study computes them."""

from __future__ import annotations

import json
from pathlib import Path

from research.smollm2_learning import figures as learning_figures
from research.smollm2_math.study import REGIME_ARMS, REGIME_FILE, START
from research.smollm2_regime.figures import BAND, reading
from research.smollm2_regime.regime import LOW_TEMPERATURE
from verl_mas.stats import markdown_table, number

DATA = Path(__file__).resolve().parent / "data"


def regime_records() -> list[dict]:
    path = DATA / REGIME_FILE
    by_arm = {r["arm"]: r for r in map(json.loads, path.read_text().splitlines())} if path.exists() else {}
    return [by_arm[name] for name in REGIME_ARMS if name in by_arm]


def regime_text() -> str:
    done = regime_records()
    if not done:
        return "Not run yet."
    low = f"sampled_t{LOW_TEMPERATURE}"
    lines = [["arm", "greedy (SE)", "sampled at 1 (SE)", f"sampled at {LOW_TEMPERATURE} (SE)",
              "invalid: greedy / sampled"]]  # fmt: skip
    for r in done:
        boards = r["eval_tasks"]
        invalid = f"{number(r['invalid_greedy'])} / {number(r['invalid_sampled'])}"
        readings = [reading(r[key], boards) for key in ("greedy", "sampled", low)]
        lines.append([f"`{r['arm']}`", *readings, invalid])
    yardstick = max(done[0]["copied_answer"], done[0]["best_constant_answer"])
    team = next((r for r in done if r["arm"] == "team"), None)
    if team is None:
        verdict = "The rule waits for the `team` arm."
    elif BAND[0] <= team["greedy"] <= BAND[1] and team["greedy"] > yardstick:
        verdict = f"The rule is met: the team's {number(team['greedy'])} lies in the band and above both yardsticks."
    else:
        verdict = f"The rule is not met by the team's {number(team['greedy'])}: the learning runs do not go ahead."
    return (
        markdown_table(lines)
        + f"\n\nSeed 0, {done[0]['eval_tasks']} evaluation problems per reading. On the same problems copying the"
        + f" example's answer solves {number(done[0]['copied_answer'])} and the most common answer"
        + f" {number(done[0]['best_constant_answer'])}. {verdict}"
    )


def tables() -> dict[str, str]:
    found = learning_figures.records(DATA, start_arms=(START,))
    return {
        "regime": regime_text(),
        "runs": learning_figures.runs_table(found, unit="problems"),
        "gains": learning_figures.gains_table(found),
        "checks": "\n\n".join(
            [
                learning_figures.validity_text(found),
                learning_figures.sharpening_text(found),
                learning_figures.noise_floor_text(found),
            ]
        ),
        "headline": learning_figures.headline(found),
    }
