"""The five-seed code-mode study's figures, recomputed from data/evals.jsonl (each run's held-out evaluations)."""

from __future__ import annotations

from pathlib import Path

from research.evaluations import each_text, first_to_last, read_rows, run_rows
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
SEEDS = (0, 1, 2, 3, 4)
SEED4_RUNS = {
    "lr3e-5_80steps": "AT-GRPO shared, lr 3e-5",
    "lr1e-4_60steps": "AT-GRPO shared, lr 1e-4",
    "per_role_40steps": "AT-GRPO per role, lr 3e-5",
    "seq_mean_40steps": "AT-GRPO shared, per-sequence loss mean",
    "per_role_plan_lr3e-4_30steps": "per role, plan lr 3e-4 (tool 3e-5)",
    "per_role_plan_lr1e-3_30steps": "per role, plan lr 1e-3 (tool 3e-5)",
}


def evaluations() -> list[dict]:
    """Every evaluation of every run, in the file's order."""
    return read_rows(DATA / "evals.jsonl")


def curve(evals: list[dict], group: str, run: str, seed: int) -> list[dict]:
    """One run's evaluations by step."""
    return run_rows(evals, group=group, run=run, seed=seed)


def gain(evals: list[dict], run: str, key: str) -> dict:
    """A method's change from step 0 to its last evaluation, paired over the five seeds."""
    return difference_summary([curve(evals, "table", run, s)[-1][key] - curve(evals, "table", run, s)[0][key] for s in SEEDS])


def headline(evals: list[dict]) -> str:
    """The one line the results table shows."""
    return f"AT-GRPO gain over the team without RL, greedy, 20 steps, 5 seeds: {summary_text(gain(evals, 'at_grpo_shared', 'greedy'))}"


def table(evals: list[dict]) -> str:
    """Per seed: the team without RL, AT-GRPO at its last evaluation, the single agent before and after GRPO."""
    lines = [["seed", "team without RL: greedy (sampled)", "AT-GRPO shared, last evaluation: greedy (sampled) [step]", "single agent + GRPO: greedy 0 -> 20 (sampled at 20)"]]
    for seed in SEEDS:
        team = curve(evals, "table", "mas_no_rl", seed)[0]
        rl = curve(evals, "table", "at_grpo_shared", seed)[-1]
        single = curve(evals, "table", "single_grpo", seed)
        lines.append([
            str(seed),
            f"{number(team['greedy'])} ({number(team['sampled'])})",
            f"{number(rl['greedy'])} ({number(rl['sampled'])}) [{rl['step']}]",
            f"{first_to_last(single, 'greedy')} ({number(single[-1]['sampled'])})",
        ])
    return markdown_table(lines)


def paired(evals: list[dict]) -> str:
    """Paired readings over the five seeds."""
    before_gap = {key: difference_summary([curve(evals, "table", "mas_no_rl", s)[0][key] - curve(evals, "table", "single_grpo", s)[0][key] for s in SEEDS]) for key in ("greedy", "sampled")}
    lines = [["reading (5 seeds)", "greedy: mean (SE) [95% interval]", "sampled"]]
    lines.append(["AT-GRPO shared: last evaluation minus step 0", summary_text(gain(evals, "at_grpo_shared", "greedy")), summary_text(gain(evals, "at_grpo_shared", "sampled"))])
    lines.append(["single agent + GRPO: step 20 minus step 0", summary_text(gain(evals, "single_grpo", "greedy")), summary_text(gain(evals, "single_grpo", "sampled"))])
    lines.append(["team without RL minus the single agent's warm start", summary_text(before_gap["greedy"]), summary_text(before_gap["sampled"])])
    return markdown_table(lines)


def later_turns(evals: list[dict]) -> str:
    """Invalid shares at turns 2 and 3 of the team without RL: this warm start never learned them."""
    lines = [["seed", "tool, turn 2 / 3 (greedy)", "tool, turn 2 / 3 (sampled)", "plan, turn 2 (sampled)"]]
    for seed in SEEDS:
        row = curve(evals, "table", "mas_no_rl", seed)[0]
        lines.append([
            str(seed),
            f"{row['tool_turn2_invalid']:.2f} / {row['tool_turn3_invalid']:.2f}",
            f"{row['tool_turn2_invalid_sampled']:.2f} / {row['tool_turn3_invalid_sampled']:.2f}",
            f"{row['plan_turn2_invalid_sampled']:.2f}",
        ])
    return markdown_table(lines)


def seed4(evals: list[dict]) -> str:
    """The longer seed-4 runs on the CPU machine."""
    lines = [["run", "steps", "greedy at each evaluation", "sampled, 0 -> last", "plan's first move invalid (sampled), 0 -> last"]]
    for run, label in SEED4_RUNS.items():
        rows = curve(evals, "seed4_cpu", run, 4)
        lines.append([
            label,
            " / ".join(str(r["step"]) for r in rows),
            each_text(rows, "greedy"),
            first_to_last(rows, "sampled"),
            first_to_last(rows, "plan_first_invalid_sampled"),
        ])
    return markdown_table(lines)


def tables() -> dict[str, str]:
    """Every block the page shows."""
    evals = evaluations()
    return {"headline": headline(evals), "table": table(evals), "paired": paired(evals), "later_turns": later_turns(evals), "seed4": seed4(evals)}
