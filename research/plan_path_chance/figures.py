"""The chance study's figures (research/plan_path_chance/README.md), from data/chance.json as
research.plan_path_chance writes it: per board size and turns, what replies that ignore the board solve."""

from __future__ import annotations

import json
import math
from pathlib import Path

from verl_mas.stats import markdown_table, number

DATA = Path(__file__).resolve().parent / "data"
RESULT_FILE = "chance.json"


def found() -> dict | None:
    path = DATA / RESULT_FILE
    return json.loads(path.read_text()) if path.exists() else None


def with_se(success: float, episodes: int) -> str:
    return f"{number(success)} ({number(math.sqrt(success * (1 - success) / episodes))})"


def chance_table() -> str:
    result = found()
    if result is None:
        return "Not run yet."
    lines = [["size", "turns", "example reply (SE)", "best fixed list (chosen on these boards)", "random lists (SE)"]]
    for row in result["rows"]:
        boards = row["boards"]
        example = f"`{row['example']}`: {with_se(row['example_success'], boards)}"
        best = f"`{row['best_fixed']}`: {number(row['best_fixed_success'])}"
        size = f"{row['size']}x{row['size']}"
        lines.append([size, str(row["turns"]), example, best, with_se(row["random_success"], boards)])
    return markdown_table(lines) + (
        f"\n\nEvaluation boards at seed 0, {', '.join(sorted({str(r['boards']) for r in result['rows']}))} per setting;"
        f" `{result['command']}`, {result['date']}. The random lists' SE counts boards, not episodes (a lower bound on"
        " its precision)."
    )


def headline() -> str:
    result = found()
    if result is None:
        return "Not run yet."
    rows = {(r["size"], r["turns"]): r for r in result["rows"]}
    parts = [
        f"{size}x{size} in {turns} turn{'s' * (turns > 1)}: random {number(rows[(size, turns)]['random_success'])}, "
        f"best fixed {number(rows[(size, turns)]['best_fixed_success'])}"
        for size, turns in sorted(rows)
        if (size, turns) in ((4, 2), (6, 1))
    ]
    return "; ".join(parts)


def tables() -> dict[str, str]:
    return {"chance": chance_table(), "headline": headline()}
