"""The code tester study's figures, recomputed from data/: every design's runs, the screening, the admitted seeds."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from research.evaluations import read_rows
from research.records import MODES, RUNS_FILE, read_runs
from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
TEAM = "at_grpo_catch_share"
SINGLE = "single_grpo"
ADMIT_COST = 0.10  # admitted when the sampled second turn costs at least this much success before RL


@dataclass(frozen=True)
class Design:
    """One design of the team's held-out gain: which runs it reads, on which seeds, at which step."""

    set_on: str
    change: str
    campaign: str
    seeds: tuple[int, ...]
    step: int


DESIGNS = (
    Design("2026-11-25", "two tester rules, one-term tasks, warm start 384 x 10, 15 steps", "first", (0, 1, 2), 15),
    Design("2026-11-26", "warm start 1024 x 8 (the env's default)", "mid", tuple(range(12)), 15),
    Design("2026-11-26", "60 steps", "long", tuple(range(12)), 60),
    Design("2026-11-26", "60 steps, 12 fresh seeds pooled in", "long", tuple(range(24)), 60),
    Design("2026-11-26", "two-term tasks (many held-out programs)", "t2", tuple(range(8)), 60),
    Design("2026-11-26", "two-term tasks, 8 fresh seeds pooled in", "t2", tuple(range(16)), 60),
    Design("2026-11-27", "model 2 x 128, 30 steps", "h128", tuple(range(2, 10)), 30),
    Design("2026-11-27", "model 2 x 128, K = 8", "h128_k8", tuple(range(2, 10)), 30),
    Design("2026-11-27", "model 4 x 256 on the GPU machine: no seed finished its warm start", "", (), 20),
    Design("2026-11-27", "lr 1e-4, 90 steps", "lr1e4", tuple(range(4, 12)), 90),
    Design("2026-11-27", "warm starts with near misses, lr 1e-4", "near_miss", (20, 21, 22, 24, 26, 27), 60),
    Design("2026-11-27", "admitted warm starts (second turn costs >= 0.10), lr 1e-4", "room", (30, 31, 36, 43, 44), 60),
    Design("2026-11-27", "**the same, stage 2 pooled in (the final design)**", "room", (30, 31, 36, 43, 44, 45, 49, 51, 61, 62, 66), 60),
)
TEAM_VS_SINGLE = (
    ("one-term tasks, 60 steps", "long", tuple(range(12)), 60),
    ("two-term tasks, 60 steps", "t2", tuple(range(16)), 60),
    ("two-term, model 2 x 128, 30 steps", "h128", tuple(range(2, 10)), 30),
    ("admitted warm starts, stage 1", "room", (30, 31, 36, 43, 44), 60),
)
FINAL = DESIGNS[-1]


def runs() -> dict[tuple[str, str, int], dict]:
    """Every run, keyed (campaign, arm, seed), its curves as {step: success}."""
    table = {}
    for run in read_runs(DATA / RUNS_FILE):
        table[(run.labels["campaign"], run.method, run.seed)] = {mode: dict(run.curve(mode)) for mode in MODES}
    return table


def reading(table: dict, campaign: str, arm: str, seed: int, key: str, step: int) -> float:
    """One run's success at one step, naming the run when it is missing."""
    try:
        return table[(campaign, arm, seed)][key][step]
    except KeyError:
        raise KeyError(f"data/runs.jsonl has no {key} reading at step {step} for {campaign}/{arm} seed {seed}") from None


def gain(table: dict, campaign: str, arm: str, seeds: tuple[int, ...], key: str, step: int) -> dict:
    """One arm's change from step 0 to `step`, paired over `seeds`."""
    return difference_summary([reading(table, campaign, arm, s, key, step) - reading(table, campaign, arm, s, key, 0) for s in seeds])


def designs_table(table: dict) -> str:
    """Every design of the team's gain, in the order they were set."""
    lines = [["#", "set on", "what changed from the one before", "seeds", "step", "sampled gain: mean (SE) [95% interval]", "greedy gain"]]
    for number_, design in enumerate(DESIGNS, 1):
        if not design.seeds:
            lines.append([str(number_), design.set_on, design.change, "0", str(design.step), "-", "-"])
            continue
        sampled, greedy = (gain(table, design.campaign, TEAM, design.seeds, key, design.step) for key in ("sampled", "greedy"))
        lines.append([str(number_), design.set_on, design.change, str(len(design.seeds)), str(design.step), summary_text(sampled), summary_text(greedy)])
    return markdown_table(lines)


def team_vs_single_table(table: dict) -> str:
    """The team's gain minus the single agent's, where the single agent ran on the same seeds."""
    lines = [["design", "seeds", "team's sampled gain", "single agent's sampled gain", "team minus single, sampled", "team minus single, greedy"]]
    for label, campaign, seeds, step in TEAM_VS_SINGLE:
        cells = {}
        for key in ("sampled", "greedy"):
            differences = [
                (reading(table, campaign, TEAM, s, key, step) - reading(table, campaign, TEAM, s, key, 0))
                - (reading(table, campaign, SINGLE, s, key, step) - reading(table, campaign, SINGLE, s, key, 0))
                for s in seeds
            ]
            cells[key] = difference_summary(differences)
        team, single = (gain(table, campaign, arm, seeds, "sampled", step) for arm in (TEAM, SINGLE))
        lines.append([label, str(len(seeds)), summary_text(team), summary_text(single), summary_text(cells["sampled"]), summary_text(cells["greedy"])])
    return markdown_table(lines)


def screening_table(screened: list[dict]) -> str:
    """Seeds screened and admitted, per stage; admission recomputed from each warm start's reading."""
    lines = [["stage", "seeds screened", "admitted", "admitted seeds"]]
    for stage in (1, 2):
        rows = [r for r in screened if r["stage"] == stage]
        admitted = [r["seed"] for r in rows if r["second_turn_adds"] <= -ADMIT_COST]
        lines.append([str(stage), f"{len(rows)} ({rows[0]['seed']}-{rows[-1]['seed']})", str(len(admitted)), " ".join(map(str, admitted))])
    return markdown_table(lines)


def admitted_table(table: dict, admitted: list[dict]) -> str:
    """Each admitted seed through RL, with its warm start evaluated again."""
    lines = [["seed", "stage", "sampled at 0 / 30 / 60", "gain", "warm start re-evaluated", "gain from it", "greedy 0 -> 60"]]
    for row in admitted:
        seed = row["seed"]
        sampled = [reading(table, "room", TEAM, seed, "sampled", step) for step in (0, 30, 60)]
        lines.append([
            str(seed),
            str(row["stage"]),
            " / ".join(number(v) for v in sampled),
            number(sampled[-1] - sampled[0], signed=True),
            number(row["reevaluated_success"]),
            number(sampled[-1] - row["reevaluated_success"], signed=True),
            f"{number(reading(table, 'room', TEAM, seed, 'greedy', 0))} -> {number(reading(table, 'room', TEAM, seed, 'greedy', 60))}",
        ])
    return markdown_table(lines)


def readings_table(table: dict, admitted: list[dict]) -> str:
    """The final design's readings, stage 2 alone and both stages, each seed against its own warm start."""
    change_rows = (
        ("first program solves, sampled", "first_program_sampled"),
        ("what the second turn adds, sampled", "second_turn_adds_sampled"),
        ("coder's unreadable second-turn replies, sampled", "coder_unreadable_second_turn_sampled"),
        ("tester, first turn, catch share (sampled)", "tester_first_turn_catch_share"),
        ("tester, first turn, credited share (sampled)", "tester_first_turn_credited_share"),
        ("tester, first turn, replies with a failing case (sampled)", "tester_first_turn_wrong_case_share"),
    )
    groups = {"stage 2 (6 seeds)": [r for r in admitted if r["stage"] == 2], "both stages (11 seeds)": admitted}
    lines = [["change through RL", *groups]]

    def cells(values_of) -> list[str]:
        return [summary_text(difference_summary([values_of(r) for r in rows])) for rows in groups.values()]

    lines.append(["**sampled success (primary)**", *(f"**{c}**" for c in cells(lambda r: sampled_gain(table, r["seed"])))])
    lines.append(["sampled success, from the re-evaluated warm start", *cells(lambda r: reading(table, "room", TEAM, r["seed"], "sampled", 60) - r["reevaluated_success"])])
    lines.append(["greedy success", *cells(lambda r: reading(table, "room", TEAM, r["seed"], "greedy", 60) - reading(table, "room", TEAM, r["seed"], "greedy", 0))])
    for label, key in change_rows:
        lines.append([label, *cells(lambda r, key=key: r["change"][key])])
    return markdown_table(lines)


def sampled_gain(table: dict, seed: int) -> float:
    """An admitted seed's sampled gain from step 0 to step 60."""
    return reading(table, "room", TEAM, seed, "sampled", 60) - reading(table, "room", TEAM, seed, "sampled", 0)


def regression_text(table: dict, admitted: list[dict]) -> str:
    """How much of the final gain is the warm starts' first reading being low by chance."""
    first = [reading(table, "room", TEAM, r["seed"], "sampled", 0) for r in admitted]
    again = [r["reevaluated_success"] for r in admitted]
    lift = difference_summary([b - a for a, b in zip(first, again)])
    total = difference_summary([sampled_gain(table, r["seed"]) for r in admitted])
    missed = [str(r["seed"]) for r in admitted if r["reevaluated_second_turn_adds"] > -ADMIT_COST]
    return (
        f"Each admitted warm start evaluated again (8 sampled episodes a task) reads {number(lift['mean'], signed=True)} "
        f"(SE {number(lift['se'])}) above its first reading ({number(sum(again) / len(again))} against "
        f"{number(sum(first) / len(first))}): {lift['mean'] / total['mean']:.0%} of the {number(total['mean'], signed=True)} gain. "
        f"On the re-evaluation, seeds {', '.join(missed)} would not have been admitted."
    )


def headline(table: dict) -> str:
    """The one line the results table shows."""
    final = gain(table, FINAL.campaign, TEAM, FINAL.seeds, "sampled", FINAL.step)
    return (
        f"Team's held-out sampled gain, {len(FINAL.seeds)} admitted seeds, 60 steps: {summary_text(final)} "
        f"(the {len(DESIGNS)}th design; no correction for the {len(DESIGNS) - 1} before it)"
    )


def tables() -> dict[str, str]:
    """Every block the page shows."""
    table = runs()
    admitted = read_rows(DATA / "admitted.jsonl")
    screened = read_rows(DATA / "screening.jsonl")
    if [r["seed"] for r in admitted] != list(FINAL.seeds):
        raise ValueError(f"data/admitted.jsonl holds seeds {[r['seed'] for r in admitted]}, the final design {list(FINAL.seeds)}")
    return {
        "headline": headline(table),
        "designs": designs_table(table),
        "team_vs_single": team_vs_single_table(table),
        "screening": screening_table(screened),
        "admitted": admitted_table(table, admitted),
        "readings": readings_table(table, admitted),
        "regression": regression_text(table, admitted),
    }



def plot(path: Path) -> None:
    """Draw every design's sampled gain with its 95% interval, in the order the designs were set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = runs()
    figure, axes = plt.subplots(figsize=(8, 3.6))
    for index, design in enumerate(DESIGNS, 1):
        if not design.seeds:
            axes.annotate("no result", (index, 0), ha="center", va="bottom", fontsize=7, rotation=90)
            continue
        summary = gain(table, design.campaign, TEAM, design.seeds, "sampled", design.step)
        low, high = summary["ci95"]
        colour = "tab:red" if design is FINAL else "tab:blue"
        axes.errorbar(index, summary["mean"], yerr=[[summary["mean"] - low], [high - summary["mean"]]], fmt="o", color=colour, capsize=3)
        axes.annotate(f"n={len(design.seeds)}", (index, high), ha="center", va="bottom", fontsize=7)
    axes.axhline(0, color="grey", linewidth=0.8)
    axes.set_xticks(range(1, len(DESIGNS) + 1))
    axes.set_xlabel("design, in the order set (see the table)")
    axes.set_ylabel("team's held-out sampled gain")
    axes.set_title("The code tester study: each design's gain with its 95% t interval (uncorrected)", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", action="store_true", help="redraw data/designs.png from the data")
    args = parser.parse_args(argv)
    if args.plot:
        plot(DATA / "designs.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
