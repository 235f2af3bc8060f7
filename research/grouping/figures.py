"""The grouping ablation's figures (research/grouping/README.md), from data/runs.jsonl (every arm's evaluations) and
data/ablation.json (the warm starts' advantages, the paired held-out shares), as research.grouping writes them."""

from __future__ import annotations

import json
from pathlib import Path

from research.learning.figures import gain_summary, mean
from research.records import RUNS_FILE, RunCurves, read_runs, select
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
ABLATION_FILE = "ablation.json"  # written by research.grouping beside the harness's runs.jsonl
BASELINE = "at_grpo_shared"
ARMS = {
    "at_grpo_shared": "`at_grpo_shared` (`task_role_turn`)",
    "at_grpo_task_role": "`at_grpo_task_role` (`task_role`)",
    "mas_grpo_task": "`mas_grpo_task` (`task`)",
    "mas_no_tree": "`mas_no_tree` (no tree)",
}
KEYS = ("task_role_turn", "task_role", "task", "no_tree")
CELLS = ("tool", "plan", "turn0", "turn2")


def advantage_table(advantages: dict) -> str:
    """Mean over seeds of each key's mean advantage (share negative) per cell, all-negative tool groups, offset share."""
    seeds = sorted(advantages)
    lines = [["grouping", *CELLS, "tool groups all negative", "offset share of variance"]]
    for key in KEYS:
        per_seed = [advantages[s][key] for s in seeds]
        row = [key]
        for cell in CELLS:
            adv = mean(p["cells"][cell]["advantage"] for p in per_seed)
            negative = mean(p["cells"][cell]["negative_share"] for p in per_seed)
            row.append(f"{adv:+.2f} ({negative:.2f})")
        row.append(f"{mean(p['cells']['tool']['all_negative_groups'] for p in per_seed):.2f}")
        row.append(f"{mean(p['offset_share'] for p in per_seed):.2f}")
        lines.append(row)
    return markdown_table(lines) + f"\n\nMeans over {len(seeds)} seeds' warm starts."


def paired(runs: list[RunCurves], arm: str, mode: str) -> dict:
    """Per seed, the arm's reading after RL minus the baseline's (the same warm start, boards and random numbers)."""
    base = {r.seed: r for r in select(runs, BASELINE)}
    return difference_summary([r.last(mode)[1] - base[r.seed].last(mode)[1] for r in select(runs, arm)])


def tables() -> dict[str, str]:
    runs = read_runs(DATA / RUNS_FILE)
    ablation = json.loads((DATA / ABLATION_FILE).read_text())
    success = [["arm", "greedy before -> after", "gain (SE) [95%]", "sampled before -> after", "gain (SE) [95%]"]]
    for arm, name in ARMS.items():
        chosen = select(runs, arm)
        row = [name]
        for mode in ("greedy", "sampled"):
            before = mean(r.at(mode, 0) for r in chosen)
            after = mean(r.last(mode)[1] for r in chosen)
            row += [f"{number(before)} -> {number(after)}", summary_text(gain_summary(chosen, mode))]
        success.append(row)
    versus = [["arm - `at_grpo_shared`", "greedy (SE) [95%]", "sampled (SE) [95%]"]]
    versus += [[ARMS[arm], summary_text(paired(runs, arm, "greedy")), summary_text(paired(runs, arm, "sampled"))]
               for arm in ARMS if arm != BASELINE]
    invalid = [["arm - `at_grpo_shared`", "tool's invalid share (SE) [95%]", "plan's invalid share (SE) [95%]"]]
    shares = ablation["paired"]
    for arm in ARMS:
        if arm != BASELINE:
            invalid.append([ARMS[arm]] + [
                summary_text(difference_summary(shares[f"eval_sampled/{role}/invalid_move_share"][arm]))
                for role in ("tool", "plan")
            ])
    n = len(select(runs, BASELINE))
    return {
        "advantages": advantage_table(ablation["advantages"]),
        "success": markdown_table(success) + f"\n\n{n} seeds, 30 steps; greedy on 64 boards, sampled 256 episodes.",
        "versus": markdown_table(versus),
        "invalid": markdown_table(invalid),
    }
