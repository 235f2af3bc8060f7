"""Training metrics of learning-harness runs averaged over windows of steps, then over the runs of each label (seeds).

Each `LABEL=GLOB` names the run folders of one arm (a glob, e.g. one method over every seed). For each run, the `--keys`
metrics (default: `research.sokoban_sudoku.replies.WINDOW_KEYS`) are averaged over consecutive windows of `--window`
training steps; each window is then averaged over the label's runs, and the table prints mean and standard error over
runs, then the change from the first window to the last, paired per run (mean, SE, 95% t interval).

    python -m research.tools.training_windows --runs \\
        base='runs/sokoban_kl/sokoban/seed*/at_grpo_shared' kl='runs/sokoban_kl/sokoban/seed*/at_grpo_shared_kl'
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from research.sokoban_sudoku.replies import WINDOW_KEYS, training_windows
from verl_mas.local.reporting import read_metrics
from verl_mas.stats import difference_summary, summary_text


def mean_se(values: Sequence[float]) -> dict[str, Any]:
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return {"mean": statistics.fmean(values) if values else math.nan, "se": se, "runs": len(values)}


def label_windows(
    folders: Sequence[Path], width: int, keys: Sequence[str] = WINDOW_KEYS
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per window: the steps it spans, and per key the mean over runs, its standard error and the number of runs;
    and per key the last window minus the first, paired per run (`verl_mas.stats.difference_summary`)."""
    per_run = [windows for folder in folders if (windows := training_windows(read_metrics(folder), width, keys))]
    shortest = min((len(windows) for windows in per_run), default=0)  # a run with no training step yet has none
    table = []
    for i in range(shortest):
        row: dict[str, Any] = {"steps": per_run[0][i]["steps"]}
        for key in keys:
            row[key] = mean_se([windows[i][key] for windows in per_run if not math.isnan(windows[i][key])])
        table.append(row)
    change = {}
    for key in keys:
        # with one window there is no last window apart from the first: no change to read
        pairs = [(w[0][key], w[shortest - 1][key]) for w in per_run] if shortest > 1 else []
        differences = [last - first for first, last in pairs if not (math.isnan(first) or math.isnan(last))]
        change[key] = difference_summary(differences)
    return table, change


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m research.tools.training_windows",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", nargs="+", required=True, help="LABEL=GLOB of learning-harness run folders")
    parser.add_argument("--window", type=int, default=10, help="training steps per window")
    parser.add_argument("--keys", nargs="+", default=list(WINDOW_KEYS), help="metrics (default: %(default)s)")
    parser.add_argument("--out", help="also write the table as JSON here")
    args = parser.parse_args(argv)
    report = {}
    for item in args.runs:
        label, sep, pattern = item.partition("=")
        folders = sorted(Path(p) for p in glob.glob(pattern))
        if not sep or not folders:
            parser.error(f"--runs {item!r}: give LABEL=GLOB matching at least one run folder")
        table, change = label_windows(folders, args.window, args.keys)
        report[label] = {"runs": [str(f) for f in folders], "windows": table, "change": change}
    print("| arm | steps | " + " | ".join(args.keys) + " |")
    print("|---|---|" + "---|" * len(args.keys))
    for label, entry in report.items():
        runs = len(entry["runs"])
        for row in entry["windows"]:
            cells = [f"{row[key]['mean']:.3f} ({row[key]['se']:.3f})" for key in args.keys]
            print(f"| {label} ({runs} runs) | {row['steps']} | " + " | ".join(cells) + " |")
        cells = [summary_text(entry["change"][key]) for key in args.keys]
        print(f"| {label} ({runs} runs) | last - first | " + " | ".join(cells) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
