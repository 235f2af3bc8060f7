"""The GPU runs' figures (research/learning_gpu/README.md), from data/runs.json."""

from __future__ import annotations

from pathlib import Path

from research.learning.figures import read_runs
from research.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"


def tables() -> dict[str, str]:
    runs = read_runs(DATA / "runs.json")
    lines = [["run", "method", "board", "seed", "model", "warm start", "before RL", "last reading (step)"]]
    for run in runs:
        model = f"{run['model']['hidden']} x {run['model']['layers']}"
        warm = f"{run['warm_start']['tasks']} tasks x {run['warm_start']['epochs']} epochs"
        last_step, last = run["greedy"][-1]
        lines.append([run["run"], run["method"], f"{run['board_size']}x{run['board_size']}", str(run["seed"]), model, warm,
                      number(run["greedy"][0][1]), f"{number(last)} ({last_step})"])
    changes = []
    for method in ("at_grpo_shared", "single_grpo"):
        chosen = [r for r in runs if r["method"] == method and r["board_size"] == 5 and len(r["greedy"]) > 1]
        summary = difference_summary([r["greedy"][-1][1] - r["greedy"][0][1] for r in chosen])
        changes.append(f"{method}: {summary_text(summary)} over {summary['n']} runs")
    return {
        "headline": f"AT-GRPO, 5x5, change from the warm start: {changes[0].split(': ', 1)[1]}",
        "runs": markdown_table(lines),
        "changes": "Change from the warm start to the last reading, 5x5 runs: " + "; ".join(changes) + ".",
    }
