"""The grouping ablation page's figures (research/grouping_ablation/README.md), from data/runs.jsonl as
research.grouping_ablation writes it: per tool cost, the validity check, each arm minus AT-GRPO, each arm's group
health, the progress, and the results table's headline."""

from __future__ import annotations

import statistics
from pathlib import Path

from research.records import RUNS_FILE, RunCurves, read_runs
from verl_mas.stats import (
    difference_summary,
    holm_adjusted,
    markdown_table,
    paired_p_value,
    paired_summary,
    summary_text,
)

DATA = Path(__file__).resolve().parent / "data"
BASELINE = "task_role_turn"
ARMS = (BASELINE, "task_role", "task")
DESIGN_SEEDS = 8
STEPS = 200
MODES = ("sampled", "greedy")  # the primary endpoint first
HEALTH = {  # the group-health means each record keeps, as the page names them
    "group_health/groups": "groups a step",
    "group_health/singleton_share": "singleton share",
    "group_health/zero_variance_share": "zero-variance share",
    "group_health/mixed_prompt_share": "mixed-prompt share",
    "group_health/prompt_offset_share": "prompt-offset share of advantage variance",
}


def complete_seeds(runs: list[RunCurves], cost: float) -> dict[int, dict[str, RunCurves]]:
    """The seeds of one tool cost whose every arm has finished, each as {arm: run}."""
    by_seed: dict[int, dict[str, RunCurves]] = {}
    for run in runs:
        if run.labels["tool_cost"] == cost:
            arms = by_seed.setdefault(run.seed, {})
            if run.method in arms:  # e.g. two processes' records merged twice: never pick one silently
                raise ValueError(f"tool cost {cost:g}, seed {run.seed}, arm {run.method}: recorded twice")
            arms[run.method] = run
    return {seed: arms for seed, arms in sorted(by_seed.items()) if set(arms) == set(ARMS)}


def gain(run: RunCurves, mode: str) -> float:
    return run.at(mode, STEPS) - run.at(mode, 0)


def level_table(runs: list[RunCurves], cost: float) -> str:
    seeds = complete_seeds(runs, cost)
    n = len(seeds)
    if n < 2:
        return f"Tool cost {cost:g}: {n} of {DESIGN_SEEDS} seeds finished; no interval yet."
    lines = [["tool cost " + f"{cost:g}", *(f"{mode} (SE) [95%]" for mode in MODES)]]
    lines.append(
        [f"`{BASELINE}` gain, step {STEPS} minus 0 (validity)"]
        + [summary_text(difference_summary([gain(arms[BASELINE], mode) for arms in seeds.values()])) for mode in MODES]
    )
    for arm in ARMS[1:]:
        lines.append(
            [f"`{arm}` minus `{BASELINE}` at step {STEPS}"]
            + [summary_text(arm_difference(seeds, arm, mode)) for mode in MODES]
        )
    unshared = [
        str(seed)
        for seed, arms in seeds.items()
        if len({(r.at("greedy", 0), r.at("sampled", 0)) for r in arms.values()}) > 1
    ]
    shared_note = (
        f" Seeds whose arms did not start alike: {', '.join(unshared)}."
        if unshared
        else " Every seed's arms started alike."
    )
    valid = difference_summary([gain(arms[BASELINE], "sampled") for arms in seeds.values()])["ci95"][0] > 0
    status = "complete" if n >= DESIGN_SEEDS else f"interim: {n} of {DESIGN_SEEDS} seeds; not a result"
    verdict = "met" if valid else "not met (this level is void)"
    return (
        markdown_table(lines)
        + f"\n\nPaired over seeds {', '.join(map(str, seeds))} ({status}). "
        + f"Validity check (sampled gain above 0): {verdict}."
        + shared_note
    )


def arm_difference(seeds: dict[int, dict[str, RunCurves]], arm: str, mode: str) -> dict:
    """`arm` minus AT-GRPO at the budget, paired per seed."""
    return difference_summary([arms[arm].at(mode, STEPS) - arms[BASELINE].at(mode, STEPS) for arms in seeds.values()])


def gains_table(runs: list[RunCurves]) -> str:
    """Per tool cost and arm, its own change from the shared warm start at the budget, over the complete seeds."""
    lines = [["tool cost", "arm", *(f"{mode} change (SE) [95%]" for mode in MODES)]]
    for cost in sorted({run.labels["tool_cost"] for run in runs}):
        seeds = complete_seeds(runs, cost)
        if not seeds:
            continue  # no seed of this level has every arm yet
        for arm in ARMS:
            changes = [summary_text(difference_summary([gain(arms[arm], m) for arms in seeds.values()])) for m in MODES]
            lines.append([f"{cost:g}", f"`{arm}`", *changes])
    return (
        markdown_table(lines) + f"\n\nStep {STEPS} minus step 0, paired per seed (the seeds with every arm finished)."
    )


def health_table(runs: list[RunCurves]) -> str:
    """Per tool cost and arm, each group-health figure's mean over steps, then over the level's complete seeds."""
    lines = [["tool cost", "arm", *HEALTH.values()]]
    for cost in sorted({run.labels["tool_cost"] for run in runs}):
        seeds = complete_seeds(runs, cost)
        if not seeds:
            continue  # no seed of this level has every arm yet
        for arm in ARMS:
            health = [arms[arm].labels["group_health"] for arms in seeds.values()]
            cells = [sum(h[key] for h in health) / len(health) for key in HEALTH]
            lines.append([f"{cost:g}", f"`{arm}`", *(f"{value:.3g}" for value in cells)])
    return (
        markdown_table(lines)
        + "\n\nEach run's mean over its 200 steps, averaged over the level's seeds with every arm finished."
    )


def headline(runs: list[RunCurves]) -> str:
    """The results table's line: per tool cost, AT-GRPO's sampled gain and each arm minus it, sampled."""
    parts = []
    for cost in sorted({run.labels["tool_cost"] for run in runs}):
        seeds = complete_seeds(runs, cost)
        if len(seeds) < 2:
            continue
        gained = summary_text(difference_summary([gain(arms[BASELINE], "sampled") for arms in seeds.values()]))
        arms = "; ".join(f"`{arm}` minus it {summary_text(arm_difference(seeds, arm, 'sampled'))}" for arm in ARMS[1:])
        parts.append(f"tool cost {cost:g}: AT-GRPO's gain {gained}; {arms}; n = {len(seeds)} seeds")
    return "sampled, at step 200: " + "; ".join(parts) if parts else "no level has two seeds with every arm finished"


def progress_table(runs: list[RunCurves]) -> str:
    costs = sorted({run.labels["tool_cost"] for run in runs})
    lines = [["tool cost", *[f"`{arm}`" for arm in ARMS], "minutes per arm (median)"]]
    for cost in costs:
        mine = [run for run in runs if run.labels["tool_cost"] == cost]
        counts = [str(sum(run.method == arm for run in mine)) for arm in ARMS]
        minutes = statistics.median(run.labels["wall_s"] / 60 for run in mine)
        lines.append([f"{cost:g}", *counts, f"{minutes:.1f}"])
    return markdown_table(lines) + f"\n\nSeeds finished per arm, of {DESIGN_SEEDS}."


def corrected_table(runs: list[RunCurves]) -> str:
    """Every arm-minus-AT-GRPO comparison (tool costs x coarser arms x endpoints) with its paired t p-value and Holm's
    adjustment over all of them: the family the page's claims are drawn from."""
    rows = []
    for cost in sorted({run.labels["tool_cost"] for run in runs}):
        seeds = complete_seeds(runs, cost)
        for arm in ARMS[1:]:
            for mode in MODES:
                summary = paired_summary(arm_difference(seeds, arm, mode)["per_seed"])
                rows.append((f"{cost:g}", f"`{arm}`", mode, summary))
    p_values = [paired_p_value(summary) for *_, summary in rows]
    adjusted = holm_adjusted(p_values)
    lines = [["tool cost", "arm minus AT-GRPO", "endpoint", "mean (SE) [95%]", "p", "Holm p"]]
    for (cost, arm, mode, summary), p, holm in zip(rows, p_values, adjusted, strict=True):
        lines.append([cost, arm, mode, summary.text(), f"{p:.3f}", f"{holm:.3f}"])
    passed = [(cost, arm, mode) for (cost, arm, mode, _), holm in zip(rows, adjusted, strict=True) if holm < 0.05]
    survivors = [f"{arm} at tool cost {cost}, {mode}" for cost, arm, mode in passed]
    return (
        markdown_table(lines)
        + f"\n\nTwo-sided paired t tests over the complete seeds; Holm's correction over these {len(rows)} comparisons."
        + f" Below 0.05 after it: {'; '.join(survivors) if survivors else 'none'}."
    )


def noise_floor(runs: list[RunCurves]) -> str:
    """The run-to-run spread of one algorithm: a per-role constant cancels inside AT-GRPO's and `task_role`'s groups, so
    their tool-cost-0 and tool-cost-2 runs of a seed are the same algorithm from the same warm start run twice."""
    low, high = complete_seeds(runs, 0.0), complete_seeds(runs, 2.0)
    paired = [seed for seed in low if seed in high]
    parts = []
    for arm in ARMS[:2]:
        for mode in MODES:
            spread = statistics.stdev(low[s][arm].at(mode, STEPS) - high[s][arm].at(mode, STEPS) for s in paired)
            parts.append(f"`{arm}` {mode} {spread:.3f}")
    return (
        f"sd over {len(paired)} seeds of (tool cost 0 minus tool cost 2) at step {STEPS}, one algorithm run twice: "
        + "; ".join(parts)
    )


def sharpening_text(runs: list[RunCurves]) -> str:
    """AT-GRPO at tool cost 0 over its seeds: sampled success after RL against the warm starts' greedy success, and
    the greedy-minus-sampled gap before and after (a gap that closes while greedy holds is sharpening)."""
    at_grpo = [arms[BASELINE] for arms in complete_seeds(runs, 0.0).values()]
    if not at_grpo:
        return "no seed of tool cost 0 has every arm finished"
    mean = statistics.fmean
    gap = [mean(run.at("greedy", step) - run.at("sampled", step) for run in at_grpo) for step in (0, STEPS)]
    return (
        f"AT-GRPO at tool cost 0, {len(at_grpo)} seeds: sampled success after RL "
        f"{mean(run.at('sampled', STEPS) for run in at_grpo):.3f}, below the warm starts' greedy "
        f"{mean(run.at('greedy', 0) for run in at_grpo):.3f}; greedy minus sampled {gap[0]:.3f} before RL, "
        f"{gap[1]:.3f} after"
    )


def tables(folder: Path = DATA) -> dict[str, str]:
    runs = read_runs(folder / RUNS_FILE)
    return {
        "progress": progress_table(runs),
        "cost_0": level_table(runs, 0.0),
        "cost_2": level_table(runs, 2.0),
        "gains": gains_table(runs),
        "health": health_table(runs),
        "headline": headline(runs),
        "corrected": corrected_table(runs),
        "noise_floor": noise_floor(runs),
        "sharpening": sharpening_text(runs),
    }
