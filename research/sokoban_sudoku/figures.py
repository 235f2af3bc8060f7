"""The Sokoban and Sudoku figures (research/sokoban_sudoku/README.md), from data/runs.jsonl, kl_windows.json and
replies.json."""

from __future__ import annotations

import json
from pathlib import Path

from research.learning.figures import METHOD_NAMES, mean
from research.records import RUNS_FILE, RunCurves, read_runs, select
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
KL_ARMS = {"mas_no_rl": "no RL", "at_grpo_shared": "AT-GRPO", "at_grpo_shared_kl": "AT-GRPO + KL 0.3"}
KL_PAIRS = (("at_grpo_shared", "mas_no_rl"), ("at_grpo_shared_kl", "mas_no_rl"), ("at_grpo_shared_kl", "at_grpo_shared"))
WINDOW_METRICS = {
    "rollout/success": "tree success",
    "rollout/plan/response_length": "plan reply tokens",
    "rollout/zero_variance_share": "zero-variance groups",
    "update/shared/neg_logprob": "sampled tokens' -log p",
}


def final(run: RunCurves, mode: str) -> float:
    """A run's last reading; a no-RL run's only one."""
    return run.last(mode)[1]


def kl_difference(runs: list[RunCurves], arm: str, baseline: str, mode: str) -> dict:
    """Per seed, `arm`'s reading after 40 steps minus `baseline`'s (the same warm start)."""
    base = {r.seed: final(r, mode) for r in select(runs, baseline, design="kl_8_seeds")}
    return difference_summary([final(r, mode) - base[r.seed] for r in select(runs, arm, design="kl_8_seeds")])


def kl_tables(runs: list[RunCurves]) -> tuple[str, str]:
    lines = [["arm - arm", "greedy (SE) [95%]", "sampled (SE) [95%]"]]
    for arm, baseline in KL_PAIRS:
        cells = [summary_text(kl_difference(runs, arm, baseline, mode)) for mode in ("greedy", "sampled")]
        lines.append([f"{KL_ARMS[arm]} - {KL_ARMS[baseline]}", *cells])
    levels = [["arm", "greedy, mean over seeds", "per seed: min - max", "sampled, mean over seeds"]]
    for arm, name in KL_ARMS.items():
        chosen = select(runs, arm, design="kl_8_seeds")
        greedy = [final(r, "greedy") for r in chosen]
        levels.append([name, number(mean(greedy)), f"{number(min(greedy))} - {number(max(greedy))}",
                       number(mean(final(r, "sampled") for r in chosen))])
    return markdown_table(lines), markdown_table(levels)


def windows_table(windows: dict) -> str:
    lines = [["arm", "steps", *WINDOW_METRICS.values()]]
    for arm, name in (("base", "AT-GRPO"), ("kl", "AT-GRPO + KL 0.3")):
        for window in windows[arm]["windows"]:
            if window["steps"] in ("1-10", "31-40"):
                cells = [f"{window[m]['mean']:.3f} ({window[m]['se']:.3f})" for m in WINDOW_METRICS]
                lines.append([name, window["steps"], *cells])
    return markdown_table(lines)


def replies_table(replies: dict) -> str:
    lines = [["model (seed 0, greedy)", "success", "distinct turn-0 plan replies", "one-move replies", "first move optimal"]]
    for name, model in replies["models"].items():
        shares = [model["solved"].count("1") / len(model["solved"]),
                  len(set(model["reply"])),
                  sum(len(r.split()) == 1 for r in model["reply"]) / len(model["reply"]),
                  model["first_optimal"].count("1") / len(model["first_optimal"])]
        lines.append([name, number(shares[0]), str(shares[1]), number(shares[2]), number(shares[3])])
    return markdown_table(lines)


def seed0_table(runs: list[RunCurves]) -> str:
    """Seed 0, 40 steps, every method: Sokoban, Sudoku with 6 and 10 givens (64 boards, greedy)."""
    lines = [["method", "Sokoban", "Sudoku, 6 givens", "Sudoku, 10 givens"]]
    for method, name in METHOD_NAMES.items():
        cells = []
        for design, env in (("all_methods", "sokoban"), ("all_methods", "sudoku"), ("sudoku_clues10", "sudoku")):
            run = select(runs, method, design=design, env=env)[0]
            before, after = run.at("greedy", 0), final(run, "greedy")
            cells.append(number(before) if method == "mas_no_rl" else f"{number(before)} -> {number(after)}")
        lines.append([name, *cells])
    return markdown_table(lines)


def settings_table(runs: list[RunCurves]) -> str:
    """Seed 0's other Sokoban settings, AT-GRPO (shared model), greedy on 128 boards."""
    lines = [["setting", "steps", "greedy at 0 -> end", "sampled at 0 -> end"]]
    for design, name in (("steps_200", "default reward, 200 steps"), ("pace", "`pace` reward"), ("turns5", "5 turns (its own warm start)")):
        run = select(runs, "at_grpo_shared", design=design)[0]
        cells = [f"{number(run.at(m, 0))} -> {number(final(run, m))}" for m in ("greedy", "sampled")]
        lines.append([name, str(run.last("greedy")[0]), *cells])
    return markdown_table(lines)


def tables() -> dict[str, str]:
    runs = read_runs(DATA / RUNS_FILE)
    differences, levels = kl_tables(runs)
    regression = kl_difference(runs, "at_grpo_shared", "mas_no_rl", "greedy")
    kl = kl_difference(runs, "at_grpo_shared_kl", "mas_no_rl", "greedy")
    return {
        "kl": differences,
        "kl_levels": levels,
        "windows": windows_table(json.loads((DATA / "kl_windows.json").read_text())),
        "replies": replies_table(json.loads((DATA / "replies.json").read_text())),
        "seed0": seed0_table(runs),
        "settings": settings_table(runs),
        "headline": f"AT-GRPO minus no RL on Sokoban, greedy after 40 steps: {summary_text(regression)}, n = {regression['n']} seeds",
        "kl_headline": f"with the KL loss, minus no RL, greedy: {summary_text(kl)}, n = {kl['n']} seeds",
    }
