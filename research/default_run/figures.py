"""The default run's figures (research/default_run/README.md), from data/default_run.json, in the words and tables
of the recorder (`research.default_run.default_run`)."""

from __future__ import annotations

import json
from pathlib import Path

from research.default_run.default_run import curve_table, headline, minutes, time_table
from verl_mas.stats import interval_text, number

DATA = Path(__file__).resolve().parent / "data"


def change_text(record: dict, mode: str) -> str:
    """After minus before with a 95% interval that treats the two readings as independent (they share boards and
    random numbers, so this overstates the noise)."""
    before, after = record[mode]["before"], record[mode]["after"]
    difference = after["success"] - before["success"]
    se = (before["se"] ** 2 + after["se"] ** 2) ** 0.5
    return f"{number(difference, signed=True)} (SE {number(se)}) {interval_text([difference - 1.96 * se, difference + 1.96 * se])}, n = {after['of']}"


def tables() -> dict[str, str]:
    record = json.loads((DATA / "default_run.json").read_text())
    return {
        "headline": f"**{headline(record)}** in {minutes(record['wall_s'])} ({record['date']})",
        "curve": curve_table(record),
        "changes": f"Greedy change: {change_text(record, 'greedy')} boards. Sampled change: {change_text(record, 'sampled')} episodes.",
        "sampled_change": f"sampled {change_text(record, 'sampled')} episodes, one run",
        "times": time_table(record),
    }
