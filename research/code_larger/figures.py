"""The code-mode 6x6 study's figures, recomputed from data/evals.jsonl (each run's held-out evaluations)."""

from __future__ import annotations

from pathlib import Path

from research.evaluations import read_rows
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
SEEDS = (1, 4, 0)
LAST = 40
TEAM_METHODS = {
    "at_grpo_shared": "**AT-GRPO, shared model**",
    "at_grpo_per_role": "**AT-GRPO, one model per role**",
    "mas_grpo_task": "team, one group per task",
}
SINGLE = "single_grpo"


def evaluations() -> dict[tuple[str, int, int], dict]:
    """Every evaluation, keyed (method, seed, step)."""
    return {(row["method"], row["seed"], row["step"]): row for row in read_rows(DATA / "evals.jsonl")}


def reading(evals: dict, method: str, seed: int, step: int, key: str = "greedy") -> float:
    """One reading of one run, naming the run when it is missing."""
    row = evals.get((method, seed, step))
    if row is None or key not in row:
        raise KeyError(f"data/evals.jsonl has no {key!r} for {method} seed {seed} step {step}")
    return row[key]


def success_table(evals: dict) -> str:
    """Greedy success at steps 0 / 20 / 40 per method and seed, sampled at 40 in brackets."""
    lines = [["method", *(f"seed {s}" for s in SEEDS), "mean at 40 (greedy)"]]
    no_rl = [reading(evals, "at_grpo_shared", s, 0) for s in SEEDS]
    no_rl_cells = [f"{number(g)} ({number(reading(evals, 'at_grpo_shared', s, 0, 'sampled'))})" for s, g in zip(SEEDS, no_rl)]
    lines.append(["team without RL (warm start only)", *no_rl_cells, number(sum(no_rl) / len(SEEDS))])
    for method, label in {**TEAM_METHODS, SINGLE: "single agent + GRPO (its own warm start)"}.items():
        cells, last = [], []
        for seed in SEEDS:
            curve = " / ".join(number(reading(evals, method, seed, step)) for step in (0, 20, LAST))
            cells.append(f"{curve} ({number(reading(evals, method, seed, LAST, 'sampled'))})")
            last.append(reading(evals, method, seed, LAST))
        lines.append([label, *cells, number(sum(last) / len(SEEDS))])
    return markdown_table(lines)


def paired_table(evals: dict) -> str:
    """Paired differences at step 40 over the three seeds, greedy and sampled."""
    comparisons = [
        ("AT-GRPO shared minus the team without RL (its gain)", "at_grpo_shared", 40, "at_grpo_shared", 0),
        ("AT-GRPO per role minus the team without RL", "at_grpo_per_role", 40, "at_grpo_shared", 0),
        ("AT-GRPO per role minus AT-GRPO shared", "at_grpo_per_role", 40, "at_grpo_shared", 40),
        ("AT-GRPO shared minus one group per task", "at_grpo_shared", 40, "mas_grpo_task", 40),
        ("AT-GRPO shared minus the single agent + GRPO", "at_grpo_shared", 40, SINGLE, 40),
    ]
    lines = [["difference at step 40 (3 seeds)", "greedy: mean (SE) [95% interval]", "sampled", "greedy per seed (1, 4, 0)"]]
    for label, method, step, baseline, base_step in comparisons:
        cells = []
        for key in ("greedy", "sampled"):
            diffs = [reading(evals, method, s, step, key) - reading(evals, baseline, s, base_step, key) for s in SEEDS]
            cells.append(difference_summary(diffs))
        per_seed = " ".join(number(d, signed=True) for d in cells[0]["per_seed"])
        lines.append([label, summary_text(cells[0]), summary_text(cells[1]), per_seed])
    return markdown_table(lines)


def headline(evals: dict) -> str:
    """The one line the results table shows."""
    gain = difference_summary([reading(evals, "at_grpo_shared", s, LAST) - reading(evals, "at_grpo_shared", s, 0) for s in SEEDS])
    return f"AT-GRPO (shared) gain on 6x6 boards, greedy, 40 steps, 3 seeds: {summary_text(gain)}"


def repairs_table(evals: dict) -> str:
    """Invalid first moves, the plan agent's first reply length and mean turns, AT-GRPO shared, step 0 -> 40."""
    lines = [["seed", "tool's first program invalid", "plan's first copy invalid", "plan's first reply, tokens", "turns per episode"]]
    for seed in SEEDS:
        cells = [str(seed)]
        for key in ("tool_first_invalid", "plan_first_invalid", "plan_first_tokens", "turns"):
            before, after = (reading(evals, "at_grpo_shared", seed, step, key) for step in (0, LAST))
            cells.append(f"{before:.2f} -> {after:.2f}" if key != "plan_first_tokens" else f"{before:.1f} -> {after:.1f}")
        lines.append(cells)
    return markdown_table(lines)


def other_runs_table(evals: dict) -> str:
    """The single runs beside the table, each against the main run it differs from."""
    runs = [
        ("shared, update.lr 3e-5 (seed 4)", "at_grpo_shared_lr3e-5", 4, 20, "at_grpo_shared"),
        ("shared, progress_reward=pace (seed 0)", "at_grpo_shared_pace", 0, 20, "at_grpo_shared"),
        ("single agent, 400 steps (seed 4)", "single_grpo_400steps", 4, 400, SINGLE),
    ]
    lines = [["run", "last step", "greedy 0 -> last", "sampled 0 -> last", "the main run at that step (greedy, sampled)"]]
    for label, method, seed, step, main in runs:
        main_step = min(step, LAST)
        main_cell = f"{number(reading(evals, main, seed, main_step))}, {number(reading(evals, main, seed, main_step, 'sampled'))} (step {main_step})"
        lines.append([
            label,
            str(step),
            f"{number(reading(evals, method, seed, 0))} -> {number(reading(evals, method, seed, step))}",
            f"{number(reading(evals, method, seed, 0, 'sampled'))} -> {number(reading(evals, method, seed, step, 'sampled'))}",
            main_cell,
        ])
    return markdown_table(lines)


def tables() -> dict[str, str]:
    """Every block the page shows."""
    evals = evaluations()
    return {
        "headline": headline(evals),
        "success": success_table(evals),
        "paired": paired_table(evals),
        "repairs": repairs_table(evals),
        "other_runs": other_runs_table(evals),
    }
