"""Training metrics of `learning.py` runs averaged over windows of steps, then over the runs of each label (seeds).

Each `LABEL=GLOB` names the run folders of one arm (a glob, e.g. one method over every seed). For each run, the
`sokoban_replies.WINDOW_KEYS` metrics are averaged over consecutive windows of `--window` training steps; each
window is then averaged over the label's runs, and the table prints mean and standard error over runs.

    .venv/bin/python experiments/training_windows.py --runs \\
        base='runs/sokoban_kl/sokoban/seed*/at_grpo_shared' kl='runs/sokoban_kl/sokoban/seed*/at_grpo_shared_kl'
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sokoban_replies import WINDOW_KEYS, training_windows  # noqa: E402  (a sibling script)

from verl_mas.local.reporting import read_metrics  # noqa: E402


def label_windows(folders: Sequence[Path], width: int) -> list[dict[str, Any]]:
    """Per window: the steps it spans, and per key the mean over runs, its standard error and the number of runs."""
    per_run = []
    for folder in folders:
        per_run.append(training_windows(read_metrics(folder), width))
    shortest = min(len(windows) for windows in per_run)
    table = []
    for i in range(shortest):
        row: dict[str, Any] = {"steps": per_run[0][i]["steps"]}
        for key in WINDOW_KEYS:
            values = [windows[i][key] for windows in per_run if not math.isnan(windows[i][key])]
            se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
            row[key] = {"mean": statistics.fmean(values) if values else math.nan, "se": se, "runs": len(values)}
        table.append(row)
    return table


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", required=True, help="LABEL=GLOB of learning.py run folders")
    parser.add_argument("--window", type=int, default=10, help="training steps per window")
    parser.add_argument("--out", help="also write the table as JSON here")
    args = parser.parse_args(argv)
    report = {}
    for item in args.runs:
        label, sep, pattern = item.partition("=")
        folders = sorted(Path(p) for p in glob.glob(pattern))
        if not sep or not folders:
            parser.error(f"--runs {item!r}: give LABEL=GLOB matching at least one run folder")
        report[label] = {"runs": [str(f) for f in folders], "windows": label_windows(folders, args.window)}
    print("| arm | steps | " + " | ".join(WINDOW_KEYS) + " |")
    print("|---|---|" + "---|" * len(WINDOW_KEYS))
    for label, entry in report.items():
        for row in entry["windows"]:
            cells = [f"{row[key]['mean']:.3f} ({row[key]['se']:.3f})" for key in WINDOW_KEYS]
            print(f"| {label} ({len(entry['runs'])} runs) | {row['steps']} | " + " | ".join(cells) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
