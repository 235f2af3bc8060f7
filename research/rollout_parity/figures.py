"""Rollouts of one fixed policy through both engines (research/rollout_parity/README.md), from
data/rollout_parity.json's per-step figures."""

from __future__ import annotations

import json
from pathlib import Path

from research.learning.figures import mean
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"


def tables() -> dict[str, str]:
    record = json.loads((DATA / "rollout_parity.json").read_text())
    local, verl = record["local_steps"], record["verl_steps"]
    steps = sorted(local, key=int)
    if sorted(verl, key=int) != steps:
        raise ValueError("rollout_parity.json: the two engines' steps differ")
    lines = [["metric (per step)", "local", "verl", "verl - local: mean (SE) [95%]"]]
    largest = 0.0
    for metric in local[steps[0]]:
        differences = [verl[s][metric] - local[s][metric] for s in steps]
        summary = difference_summary(differences)
        if summary["se"]:
            largest = max(largest, abs(summary["mean"]) / summary["se"])
        lines.append([metric, number(mean(local[s][metric] for s in steps)), number(mean(verl[s][metric] for s in steps)),
                      summary_text(summary)])
    return {
        "headline": f"largest |verl - local| over {len(lines) - 1} per-step metrics: {largest:.1f} SE, n = {len(steps)} steps",
        "comparison": markdown_table(lines) + f"\n\nn = {len(steps)} steps; the largest |difference| is {largest:.1f} SE.",
    }
