"""The arithmetic study's figures (research/smollm2_math/README.md), from data/regime.jsonl and data/runs.jsonl as
research.smollm2_math writes them: the regime's readings with the chance yardsticks and the rule, the first design's
learning tables as the Plan-Path learning study computes them, and the second design's: the single agent's gain, the
team minus the single agent, and verl's runs against their bars."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from research.smollm2_learning import figures as learning_figures
from research.smollm2_math.study import (
    FIRST_DESIGN_ARMS,
    LOCAL_ARMS,
    REGIME_ARMS,
    REGIME_FILE,
    START,
    VERL_ARMS,
    VERL_TWINS,
)
from research.smollm2_regime.figures import BAND, reading
from research.smollm2_regime.regime import LOW_TEMPERATURE
from verl_mas.stats import PairedSummary, markdown_table, number, paired_summary

DATA = Path(__file__).resolve().parent / "data"
# The second design's verl runs (seed 0), each with its local twin.
TWIN_OF_VERL_ARM = {VERL_ARMS[router]: VERL_TWINS[router] for router in VERL_ARMS}
ARM_ORDER = (*LOCAL_ARMS, *TWIN_OF_VERL_ARM)
Found = dict[tuple[int, str], dict]


def regime_records() -> list[dict]:
    path = DATA / REGIME_FILE
    by_arm = {r["arm"]: r for r in map(json.loads, path.read_text().splitlines())} if path.exists() else {}
    return [by_arm[name] for name in REGIME_ARMS if name in by_arm]


def regime_text() -> str:
    done = regime_records()
    if not done:
        return "Not run yet."
    low = f"sampled_t{LOW_TEMPERATURE}"
    lines = [["arm", "greedy (SE)", "sampled at 1 (SE)", f"sampled at {LOW_TEMPERATURE} (SE)",
              "invalid: greedy / sampled"]]  # fmt: skip
    for r in done:
        boards = r["eval_tasks"]
        invalid = f"{number(r['invalid_greedy'])} / {number(r['invalid_sampled'])}"
        readings = [reading(r[key], boards) for key in ("greedy", "sampled", low)]
        lines.append([f"`{r['arm']}`", *readings, invalid])
    yardstick = max(done[0]["copied_answer"], done[0]["best_constant_answer"])
    team = next((r for r in done if r["arm"] == "team"), None)
    if team is None:
        verdict = "The rule waits for the `team` arm."
    elif BAND[0] <= team["greedy"] <= BAND[1] and team["greedy"] > yardstick:
        verdict = f"The rule is met: the team's {number(team['greedy'])} lies in the band and above both yardsticks."
    else:
        verdict = f"The rule is not met by the team's {number(team['greedy'])}: the learning runs do not go ahead."
    return (
        markdown_table(lines)
        + f"\n\nSeed 0, {done[0]['eval_tasks']} evaluation problems per reading. On the same problems copying the"
        + f" example's answer solves {number(done[0]['copied_answer'])} and the most common answer"
        + f" {number(done[0]['best_constant_answer'])}. {verdict}"
    )


def single_text(found: Found) -> str:
    """`single_grpo`'s own change, and the team (`at_grpo`) minus the single agent after RL, paired per seed."""
    seeds = sorted(seed for seed, arm in found if arm == "single_grpo")
    if not seeds:
        return "No `single_grpo` run has finished yet."
    status = "" if complete(seeds) else " (interim: not a result)"
    own = markdown_table([learning_figures.GAINS_HEADER, *learning_figures.gain_rows(found, "single_grpo")])
    lines = [["endpoint", "`at_grpo` minus `single_grpo` after RL (SE) [95%]", "n", "seeds"]]
    both = seeds_with_team(found)
    for key, name in learning_figures.ENDPOINTS.items():
        lines.append([name, team_gap(found, both, key).text(), str(len(both)), ", ".join(map(str, both))])
    return (
        own
        + f"\n\nThe single agent's change, paired per seed over {len(seeds)} seed(s){status}; Holm over its 3"
        + " endpoints."
        + "\n\n"
        + markdown_table(lines)
        + "\n\nThe team minus the single agent after 40 steps, paired per seed (the same seed reads the same problems);"
        + " greedy is the design's endpoint, the others descriptive; uncorrected."
    )


def complete(seeds: list[int]) -> bool:
    return set(seeds) >= set(learning_figures.DESIGN_SEEDS)


def seeds_with_team(found: Found) -> list[int]:
    """The seeds where both `single_grpo` and `at_grpo` finished."""
    return sorted(seed for seed, arm in found if arm == "single_grpo" and (seed, "at_grpo") in found)


def team_gap(found: Found, seeds: list[int], key: str) -> PairedSummary:
    """`at_grpo` minus `single_grpo` after RL on endpoint `key`, paired over `seeds`."""
    return paired_summary([found[(s, "at_grpo")][key][1] - found[(s, "single_grpo")][key][1] for s in seeds])


def single_headline(found: Found) -> str:
    """The results table's line: the team minus the single agent after RL, and the single agent's own change."""
    seeds = seeds_with_team(found)
    if not seeds:
        return "Not run yet."
    gap = team_gap(found, seeds, "greedy")
    own = learning_figures.gains({key: r for key, r in found.items() if key[0] in seeds}, "single_grpo")["greedy"]
    status = "" if complete(seeds) else " (interim)"
    return (
        f"Team minus single agent after 40 steps, greedy: {gap.text()}; the single agent's own change: {own.text()};"
        f" n = {gap.n} seeds{status}"
    )


def twin_gaps(found: Found) -> list[float]:
    """|at_grpo - at_grpo_again| greedy after RL, per seed with both: the largest is the design's floor."""
    return [abs(found[(s, "at_grpo")]["greedy"][1] - found[(s, "at_grpo_again")]["greedy"][1])
            for s, arm in found if arm == "at_grpo" and (s, "at_grpo_again") in found]  # fmt: skip


@dataclass(frozen=True)
class VerlReading:
    """One verl arm at seed 0 against its local twin and the twins' floor."""

    greedy: tuple[float, float]
    change: PairedSummary
    twin_after: float | None
    gap: float | None
    bar: str


def verl_readings(found: Found) -> tuple[dict[str, VerlReading | None], float | None, int]:
    """Per verl arm its reading (None: not run yet), the floor (the largest twin gap) and how many seeds gave it."""
    gaps = twin_gaps(found)
    floor = max(gaps) if gaps else None
    readings: dict[str, VerlReading | None] = {}
    for arm, twin in TWIN_OF_VERL_ARM.items():
        verl = found.get((0, arm))
        if verl is None:
            readings[arm] = None
            continue
        before, after = verl["greedy_per_problem"]
        change = paired_summary([a - b for a, b in zip(after, before, strict=True)])
        local = found.get((0, twin))
        gap = None if local is None else verl["greedy"][1] - local["greedy"][1]
        gains = change.ci95 is not None and change.ci95[0] > 0
        agrees = None if gap is None or floor is None else abs(gap) <= floor
        bar = "met" if gains and agrees else ("open" if agrees is None and gains else "not met")
        twin_after = None if local is None else local["greedy"][1]
        readings[arm] = VerlReading(tuple(verl["greedy"]), change, twin_after, gap, bar)
    return readings, floor, len(gaps)


def verl_text(found: Found) -> str:
    """Per router, verl's greedy change paired per problem, and its reading after RL minus its local twin's against
    the twins' floor."""
    readings, floor, seeds = verl_readings(found)
    lines = [["arm", "greedy: before -> after", "change, paired per problem (SE) [95%]", "local twin after",
              "verl minus twin", "bar"]]  # fmt: skip
    for arm, arm_reading in readings.items():
        if arm_reading is None:
            lines.append([f"`{arm}`", "not run yet", "", "", "", ""])
            continue
        lines.append([
            f"`{arm}`",
            f"{number(arm_reading.greedy[0])} -> {number(arm_reading.greedy[1])}",
            arm_reading.change.text(),
            number(arm_reading.twin_after),
            number(arm_reading.gap, signed=True),
            arm_reading.bar,
        ])  # fmt: skip
    return (
        markdown_table(lines)
        + "\n\nSeed 0. The bar: the change's interval above 0, and |verl minus twin| within the floor, the largest"
        + f" gap between an `at_grpo` run and its `at_grpo_again` twin ({number(floor)}, over {seeds} seeds);"
        + " each bar uncorrected."
    )


def verl_headline(found: Found) -> str:
    """The results table's line: each verl arm's greedy change and its gap to its local twin, or that it has not run."""
    readings, floor, _ = verl_readings(found)
    parts = [
        f"`{arm}`: not run yet"
        if arm_reading is None
        else f"`{arm}` greedy {number(arm_reading.greedy[0])} -> {number(arm_reading.greedy[1])}, change "
        f"{arm_reading.change.text()}, minus its local twin {number(arm_reading.gap, signed=True)} "
        f"(floor {number(floor)}), bar {arm_reading.bar}"
        for arm, arm_reading in readings.items()
    ]
    problems = {arm_reading.change.n for arm_reading in readings.values() if arm_reading is not None}
    return "; ".join(parts) + "; seed 0" + "".join(f", n = {n} problems" for n in sorted(problems))


def tables() -> dict[str, str]:
    found = learning_figures.records(DATA, start_arms=(START,), arms=ARM_ORDER)
    first = {key: record for key, record in found.items() if key[1] in FIRST_DESIGN_ARMS}
    return {
        "regime": regime_text(),
        "runs": learning_figures.runs_table(found, unit="problems"),
        "gains": learning_figures.gains_table(first),
        "checks": "\n\n".join(
            [
                learning_figures.validity_text(first),
                learning_figures.sharpening_text(first),
                learning_figures.noise_floor_text(first),
            ]
        ),
        "single": single_text(found),
        "verl": verl_text(found),
        "verl_headline": verl_headline(found),
        "headline": learning_figures.headline(first),
        "single_headline": single_headline(found),
    }
