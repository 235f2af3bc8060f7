"""The role-swap probe's figures (research/role_swap/README.md), from data/role_swap.json as research.role_swap writes
it: per seed, the run's own final evaluation and its checkpoint read as trained and swapped, greedy and sampled."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from verl_mas.stats import difference_summary, markdown_table, number, summary_text

DATA = Path(__file__).resolve().parent / "data"
RESULT_FILE = "role_swap.json"  # written by research.role_swap into its output folder
ROLES = ("tool", "plan")
MODES = ("greedy", "sampled")
SAMPLED_AGREEMENT = 0.06  # the design's bound on |as trained - the run's own| for the sampled reading (2 SE)


def swap_effect(seeds: list[dict], mode: str, value=lambda reading: reading["success"]) -> dict:
    """Per seed, `value` of the swapped reading minus that of the as-trained one, summarised with a 95% t interval."""
    return difference_summary([value(s["readings"][f"{mode}_swapped"]) - value(s["readings"][mode]) for s in seeds])


def readings_table(seeds: list[dict]) -> str:
    lines = [["seed", "mode", "warm start", "run's own final", "as trained", "swapped"]]
    for s in seeds:
        for mode in MODES:
            r = s["readings"]
            lines.append([
                str(s["seed"]), mode, number(s[f"run_{mode}_before"]), number(s[f"run_{mode}"]),
                number(r[mode]["success"]), number(r[f"{mode}_swapped"]["success"]),
            ])  # fmt: skip
    greedy, sampled = (seeds[0]["readings"][mode]["episodes"] for mode in MODES)
    step = seeds[0]["step"]
    return markdown_table(lines) + f"\n\nHeld-out success at step {step}; greedy {greedy} episodes, sampled {sampled}."


def effect_table(seeds: list[dict]) -> str:
    lines = [["endpoint", "as trained", "swapped", "swapped - as trained (SE) [95%]"]]
    for mode in MODES:
        trained = sum(s["readings"][mode]["success"] for s in seeds) / len(seeds)
        swapped = sum(s["readings"][f"{mode}_swapped"]["success"] for s in seeds) / len(seeds)
        lines.append([f"{mode} success", number(trained), number(swapped), summary_text(swap_effect(seeds, mode))])
    return markdown_table(lines) + f"\n\nMeans over {len(seeds)} seeds; differences paired per seed."


def invalid_share(role: str, reading: dict) -> float:
    return reading["invalid_share"][role]


def invalid_table(seeds: list[dict]) -> str:
    lines = [["role's invalid share", *(f"{mode}: swapped - as trained (SE) [95%]" for mode in MODES)]]
    for role in ROLES:
        share = functools.partial(invalid_share, role)
        lines.append([f"`{role}` role", *(summary_text(swap_effect(seeds, mode, share)) for mode in MODES)])
    return markdown_table(lines)


def validity_text(seeds: list[dict]) -> str:
    greedy = [s["readings"]["greedy"]["success"] - s["run_greedy"] for s in seeds]
    sampled = [s["readings"]["sampled"]["success"] - s["run_sampled"] for s in seeds]
    exact = all(d == 0 for d in greedy)
    close = all(abs(d) < SAMPLED_AGREEMENT for d in sampled)
    verdict = "met" if exact and close else "NOT met: the table is void"
    return (
        f"Validity check {verdict}. Greedy, as trained minus the run's own final evaluation: "
        f"{', '.join(number(d, signed=True) for d in greedy)} (must be exactly 0). Sampled: "
        f"{', '.join(number(d, signed=True) for d in sampled)} (must be within {SAMPLED_AGREEMENT})."
    )


def tables() -> dict[str, str]:
    seeds = json.loads((DATA / RESULT_FILE).read_text())
    greedy, sampled = (summary_text(swap_effect(seeds, mode)) for mode in MODES)
    return {
        "readings": readings_table(seeds),
        "effect": effect_table(seeds),
        "invalid": invalid_table(seeds),
        "validity": validity_text(seeds),
        "headline": f"swapped minus as trained, greedy {greedy}, sampled {sampled}, n = {len(seeds)} seeds",
    }
