"""The natural-offsets page's figures (research/natural_offsets/README.md), from data/runs.jsonl as
research.natural_offsets writes it: per environment, the coarser groupings' offset and mixed shares over its steps."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from research.natural_offsets.offsets import COARSER, ENVS, RUNS_FILE
from verl_mas.stats import markdown_table

DATA = Path(__file__).resolve().parent / "data"


def records(folder: Path = DATA) -> list[dict]:
    path = folder / RUNS_FILE
    found = {r["env"]: r for r in map(json.loads, path.read_text().splitlines())} if path.exists() else {}
    return [found[name] for name in ENVS if name in found]  # the design's order


def defined_mean(steps: list[dict], grouping: str, key: str) -> float | None:
    """The mean over the steps whose `grouping` groups have reward variance (a step where every group is constant
    has no advantage variance to split, so its share is undefined, not 0)."""
    values = [step[f"{grouping}/{key}"] for step in steps if step[f"{grouping}/zero_variance_share"] < 1.0]
    return statistics.fmean(values) if values else None


def share(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.2f}"


def offsets_table(folder: Path = DATA) -> str:
    found = records(folder)
    if not found:
        return "No run has finished yet."
    lines = [["env", *(f"`{g}`: offset share / mixed share" for g in COARSER), "AT-GRPO zero-variance share",
              "steps", "wall, min"]]  # fmt: skip
    for r in found:
        cells = [f"{share(defined_mean(r['steps'], g, 'prompt_offset_share'))} / "
                 f"{share(defined_mean(r['steps'], g, 'mixed_prompt_share'))}" for g in COARSER]  # fmt: skip
        zero = statistics.fmean(step["task_role_turn/zero_variance_share"] for step in r["steps"])
        lines.append([r["env"], *cells, f"{zero:.2f}", str(len(r["steps"])), f"{r['wall_s'] / 60:.0f}"])
    return markdown_table(lines) + (
        "\n\nSeed 0, one run each; each figure is a mean over the run's steps whose groups under that grouping had"
        " reward variance (a step without has no share)."
    )


def headline(folder: Path = DATA) -> str:
    found = records(folder)
    if not found:
        return "Not run yet."
    parts = [
        f"{r['env']} {share(defined_mean(r['steps'], 'task', 'prompt_offset_share'))} / "
        f"{share(defined_mean(r['steps'], 'task_role', 'prompt_offset_share'))}"
        for r in found
    ]
    return "prompt-offset share under `task` / `task_role`, 10 AT-GRPO steps, seed 0: " + "; ".join(parts)


def tables(folder: Path = DATA) -> dict[str, str]:
    return {"offsets": offsets_table(folder), "headline": headline(folder)}
