"""The learning study's figures (research/smollm2_learning/README.md), from data/runs.jsonl as
research.smollm2_learning writes it: per run its readings before and after, AT-GRPO's paired gains with Holm's
correction, the one-algorithm noise floor, the sharpening check, the validity check and the results line."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from research.smollm2_learning.learning import ARMS, RUNS_FILE
from research.smollm2_regime.regime import DESIGNS as REGIME_DESIGNS
from research.smollm2_regime.regime import LOW_TEMPERATURE
from verl_mas.stats import PairedSummary, holm_adjusted, markdown_table, number, paired_p_value, paired_summary

DATA = Path(__file__).resolve().parent / "data"
DESIGN_SEEDS = (0, 1, 2)
LOW = f"sampled_t{LOW_TEMPERATURE}"
ENDPOINTS = {"greedy": "greedy", "sampled": "sampled at 1", LOW: f"sampled at {LOW_TEMPERATURE}"}  # primary first
# "The reward rises", fixed with the code before the first record: the mean of the last RISE_WINDOW steps' training
# reward above the mean of the first RISE_WINDOW.
RISE_WINDOW = 10


def records(
    folder: Path = DATA, start_arms: tuple[str, ...] = tuple(REGIME_DESIGNS["first"]), arms: Sequence[str] = tuple(ARMS)
) -> dict[tuple[int, str], dict]:
    """Every finished (seed, arm), in the order of `arms`; a pair recorded twice, an arm not in `arms`, or one started
    from another start than `start_arms` (this study's: the regime study's first design's arms), is an error, never a
    silent pick."""
    path = folder / RUNS_FILE
    found: dict[tuple[int, str], dict] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        record = json.loads(line)
        key = (record["seed"], record["arm"])
        if record["start_arm"] not in start_arms:
            raise ValueError(
                f"seed {key[0]}, arm {key[1]} in {path} starts from {record['start_arm']!r}, not one of {start_arms}"
            )
        if key in found:
            raise ValueError(f"seed {key[0]}, arm {key[1]}: recorded twice in {path}")
        if key[1] not in arms:
            raise ValueError(f"seed {key[0]}: arm {key[1]!r} in {path} is not one of {tuple(arms)}")
        found[key] = record
    return dict(sorted(found.items(), key=lambda item: (item[0][0], list(arms).index(item[0][1]))))


def reward_rises(record: dict) -> bool:
    curve = record["reward_curve"]
    return statistics.fmean(curve[-RISE_WINDOW:]) > statistics.fmean(curve[:RISE_WINDOW])


def first_and_last(curve: list[float]) -> str:
    return f"{number(statistics.fmean(curve[:RISE_WINDOW]))} / {number(statistics.fmean(curve[-RISE_WINDOW:]))}"


def runs_table(found: dict[tuple[int, str], dict], unit: str = "boards") -> str:
    if not found:
        return "No run has finished yet."
    lines = [["seed", "arm", *(f"{name}: before -> after" for name in ENDPOINTS.values()),
              f"reward: first / last {RISE_WINDOW} steps", f"zero-variance groups: first / last {RISE_WINDOW} steps",
              "step, s (median)"]]  # fmt: skip
    for (seed, arm), r in found.items():
        readings = [f"{number(r[key][0])} -> {number(r[key][1])}" for key in ENDPOINTS]
        curves = [first_and_last(r["reward_curve"]), first_and_last(r["zero_variance_curve"])]
        lines.append([str(seed), f"`{arm}`", *readings, *curves, f"{r['step_s_median']:.1f}"])
    boards = sorted({r["eval_tasks"] for r in found.values()})
    return markdown_table(lines) + f"\n\n{', '.join(map(str, boards))} evaluation {unit} per reading, one episode each."


def gains(found: dict[tuple[int, str], dict], arm: str) -> dict[str, PairedSummary]:
    """Per endpoint, the arm's after-minus-before change paired over the seeds it has finished."""
    mine = [r for (_, name), r in found.items() if name == arm]
    return {key: paired_summary([r[key][1] - r[key][0] for r in mine]) for key in ENDPOINTS}


def seeds_with_both(found: dict[tuple[int, str], dict]) -> list[int]:
    return sorted({seed for seed, _ in found if all((seed, arm) in found for arm in ARMS)})


GAINS_HEADER = ["arm", "endpoint", "change after minus before (SE) [95%]", "n", "p", "Holm p (3 endpoints)"]


def gain_rows(found: dict[tuple[int, str], dict], arm: str) -> list[list[str]]:
    """The arm's rows of a gains table: per endpoint its paired change, t test and Holm-adjusted p over the three."""
    summaries = gains(found, arm)
    p_values = [paired_p_value(summary) for summary in summaries.values()]
    adjusted = holm_adjusted(p_values) if None not in p_values else [None] * len(p_values)
    return [
        [f"`{arm}`", ENDPOINTS[key], summary.text(), str(summary.n), number(p), number(holm)]
        for (key, summary), p, holm in zip(summaries.items(), p_values, adjusted, strict=True)
    ]


def gains_table(found: dict[tuple[int, str], dict]) -> str:
    if not found:
        return "No run has finished yet."
    lines = [GAINS_HEADER, *(row for arm in ARMS for row in gain_rows(found, arm))]
    status = "complete" if all((s, a) in found for s in DESIGN_SEEDS for a in ARMS) else "interim: not a result"
    return (
        markdown_table(lines)
        + f"\n\nPaired per seed over the seeds each arm finished ({status}); two-sided t tests, Holm's correction over"
        + " the 3 endpoints of each arm. `at_grpo` is the design's test; `at_grpo_again` is its replicate."
    )


def noise_floor_text(found: dict[tuple[int, str], dict]) -> str:
    """The sd over seeds of (at_grpo - at_grpo_again) after-readings, divided by sqrt 2: one run's spread."""
    seeds = seeds_with_both(found)
    if len(seeds) < 2:
        return f"Noise floor: {len(seeds)} seed(s) with both runs; it needs 2."
    parts = []
    for key, name in ENDPOINTS.items():
        twins = [found[(s, "at_grpo")][key][1] - found[(s, "at_grpo_again")][key][1] for s in seeds]
        parts.append(f"{name} {number(statistics.stdev(twins) / 2**0.5)}")
    return f"Noise floor (one run's sd, from the twins of {len(seeds)} seeds): " + "; ".join(parts) + "."


def sharpening_text(found: dict[tuple[int, str], dict]) -> str:
    """The design's rule: a sampled gain is learning only where the after-reading at 1 exceeds the start at 0.5."""
    mine = [r for (_, arm), r in found.items() if arm == "at_grpo"]
    if not mine:
        return "Sharpening check: no `at_grpo` run yet."
    beyond = paired_summary([r["sampled"][1] - r[LOW][0] for r in mine])
    return (
        f"Sharpening check: `at_grpo`'s sampled success at 1 after RL minus the start's at {LOW_TEMPERATURE}: "
        + f"{beyond.text()}, n = {beyond.n}; above the start's lower-temperature reading in "
        + f"{sum(r['sampled'][1] > r[LOW][0] for r in mine)} of {len(mine)} seeds."
    )


def validity_text(found: dict[tuple[int, str], dict]) -> str:
    mine = {seed: r for (seed, arm), r in found.items() if arm == "at_grpo"}
    rising = [seed for seed, r in mine.items() if reward_rises(r)]
    verdict = "met" if len(rising) >= 2 else ("not met" if len(mine) == len(DESIGN_SEEDS) else "open")
    return (
        f"Validity check (the training reward rises in at least 2 of 3 seeds): {verdict}; it rises in "
        + f"{len(rising)} of {len(mine)} finished `at_grpo` runs"
        + (f" (seed{'s' if len(rising) > 1 else ''} {', '.join(map(str, rising))})." if rising else ".")
    )


def headline(found: dict[tuple[int, str], dict]) -> str:
    summaries = gains(found, "at_grpo")
    n = summaries["greedy"].n
    if n == 0:
        return "Not run yet."
    parts = "; ".join(f"{name} {summaries[key].text()}" for key, name in ENDPOINTS.items())
    status = "" if n >= len(DESIGN_SEEDS) else f" (interim: {n} of {len(DESIGN_SEEDS)} seeds)"
    return f"AT-GRPO's change after 40 steps: {parts}; n = {n} seeds{status}"


def tables(folder: Path = DATA) -> dict[str, str]:
    found = records(folder)
    return {
        "runs": runs_table(found),
        "gains": gains_table(found),
        "checks": "\n\n".join([validity_text(found), sharpening_text(found), noise_floor_text(found)]),
        "headline": headline(found),
    }
