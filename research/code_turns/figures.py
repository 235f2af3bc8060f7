"""The code-mode warm-start study's figures, recomputed from data/evals.jsonl (each run's held-out evaluations)."""

from __future__ import annotations

from pathlib import Path

from research.evaluations import each_text, first_to_last, read_rows, run_rows
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"


def evaluations() -> list[dict]:
    """Every evaluation of every run, in the file's order."""
    return read_rows(DATA / "evals.jsonl")


def curve(evals: list[dict], warm_start: str, method: str, seed: int) -> list[dict]:
    """One run's evaluations by step."""
    return run_rows(evals, warm_start=warm_start, method=method, seed=seed)


def full_table(evals: list[dict]) -> str:
    """The full warm start: the team without RL, AT-GRPO from it, and the single agent, per seed."""
    lines = [["method", "seed", "greedy, step 0 -> last (last step)", "sampled, step 0 -> last"]]
    for label, method, seeds in (
        ("**team without RL, new warm start**", "mas_no_rl", (0, 1, 4)),
        ("AT-GRPO shared from it", "at_grpo_shared", (1, 4)),
        ("single agent + GRPO (its own warm start)", "single_grpo", (1, 4)),
    ):
        for seed in seeds:
            rows = curve(evals, "full", method, seed)
            first, last = rows[0], rows[-1]
            greedy = number(first["greedy"]) if last is first else f"{first_to_last(rows, 'greedy')} ({last['step']})"
            sampled = number(first["sampled"]) if last is first else first_to_last(rows, "sampled")
            lines.append([label, str(seed), greedy, sampled])
    return markdown_table(lines)


def team_minus_single(evals: list[dict]) -> dict:
    """The team without RL minus the single agent after its GRPO, greedy, paired by seed (1 and 4)."""
    return difference_summary([curve(evals, "full", "mas_no_rl", s)[0]["greedy"] - curve(evals, "full", "single_grpo", s)[-1]["greedy"] for s in (1, 4)])


def headline(evals: list[dict]) -> str:
    """The one line the results table shows: the new warm start's greedy success before RL over its three seeds."""
    before = difference_summary([curve(evals, "full", "mas_no_rl", s)[0]["greedy"] for s in (0, 1, 4)])
    per_seed = " ".join(number(v) for v in before["per_seed"])
    return f"Team without RL, 5x5 code mode, greedy held-out success over 3 seeds: {number(before['mean'])} ({per_seed})"


def turns_table(evals: list[dict]) -> str:
    """How often the tool's programs fail at turns 1 and 2 with the new warm start, before RL (sampled)."""
    lines = [["seed", "tool's first program invalid (sampled)", "tool's turn-2 program invalid (sampled)", "plan's first copy invalid (greedy)"]]
    for seed in (0, 1, 4):
        row = curve(evals, "full", "mas_no_rl", seed)[0]
        lines.append([str(seed), f"{row['tool_first_invalid_sampled']:.2f}", f"{row['tool_second_invalid_sampled']:.2f}", f"{row['plan_first_invalid']:.2f}"])
    return markdown_table(lines)


def short_table(evals: list[dict]) -> str:
    """The short warm start (512 tasks x 6 epochs) and the RL runs from it."""
    runs = (
        ("seed 1, AT-GRPO shared, lr 3e-5", "short", "at_grpo_shared", 1),
        ("seed 4, AT-GRPO shared, lr 3e-5", "short", "at_grpo_shared", 4),
        ("seed 4, per role, plan lr 3e-4 (tool 3e-5), plan reply cap", "short_capped", "short_per_role_plan3e-4", 4),
        ("seed 4, shared, lr 1e-4, plan reply cap", "short_capped", "short_shared_lr1e-4", 4),
    )
    lines = [["run", "greedy at 0 / 10 / ...", "sampled at 0 / 10 / ...", "plan's first copy invalid (greedy), 0 -> last", "tool's turn-3 program invalid (greedy), 0 -> last"]]
    for label, warm_start, method, seed in runs:
        rows = curve(evals, warm_start, method, seed)
        lines.append([
            label,
            each_text(rows, "greedy"),
            each_text(rows, "sampled"),
            first_to_last(rows, "plan_first_invalid", ".2f"),
            first_to_last(rows, "tool_third_invalid", ".2f"),
        ])
    return markdown_table(lines)


def tables() -> dict[str, str]:
    """Every block the page shows."""
    evals = evaluations()
    gap = team_minus_single(evals)
    return {
        "headline": headline(evals),
        "full": full_table(evals),
        "team_minus_single": f"Team without RL minus the single agent after 40 GRPO steps, greedy, seeds 1 and 4: {summary_text(gap)}; per seed {' '.join(number(d, signed=True) for d in gap['per_seed'])}",
        "turns": turns_table(evals),
        "short": short_table(evals),
    }
