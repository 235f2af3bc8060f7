"""The GPU runs' figures (research/learning_gpu/README.md), from data/runs.jsonl."""

from __future__ import annotations

from pathlib import Path

from research.records import RUNS_FILE, read_runs
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"


def tables() -> dict[str, str]:
    runs = read_runs(DATA / RUNS_FILE)
    lines = [["run", "method", "board", "seed", "model", "warm start", "before RL", "last reading (step)"]]
    for run in runs:
        labels = run.labels
        model = f"{labels['model']['hidden']} x {labels['model']['layers']}"
        warm = f"{labels['warm_start']['tasks']} tasks x {labels['warm_start']['epochs']} epochs"
        last_step, last = run.last("greedy")
        board = f"{labels['board_size']}x{labels['board_size']}"
        lines.append([labels["run"], run.method, board, str(run.seed), model, warm, number(run.greedy[0][1]),
                      f"{number(last)} ({last_step})"])
    changes = []
    for method in ("at_grpo_shared", "single_grpo"):
        chosen = [r for r in runs if r.method == method and r.labels["board_size"] == 5 and len(r.greedy) > 1]
        summary = difference_summary([r.last("greedy")[1] - r.greedy[0][1] for r in chosen])
        changes.append(f"{method}: {summary_text(summary)} over {summary['n']} runs")
    return {
        "headline": f"AT-GRPO, 5x5, change from the warm start: {changes[0].split(': ', 1)[1]}",
        "runs": markdown_table(lines),
        "changes": "Change from the warm start to the last reading, 5x5 runs: " + "; ".join(changes) + ".",
    }
