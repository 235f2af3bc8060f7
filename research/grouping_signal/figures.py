"""The grouping signal page's figures (research/grouping_signal/README.md), from data/signal.json as
research.grouping_signal writes it: per warm start, each setting's Gram matrix of batch gradients."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from research.grouping_signal.gradient_stats import (
    Estimate,
    cosine_gain,
    expected_cosine,
    jackknife,
    mean_loo_cosine,
    pooled,
    snr,
    snr_ratio,
    step_ratio,
)
from research.grouping_signal.settings import FINE, SETTINGS, SIGNAL_FILE
from verl_mas.stats import markdown_table

DATA = Path(__file__).resolve().parent / "data"


def load(folder: Path = DATA) -> dict[str, Any]:
    return json.loads((folder / SIGNAL_FILE).read_text())


def matrices(seed: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A warm start's Gram matrices and cross products with FINE, back in units of ||g||^2."""
    unit = seed["unit"]
    gram = {name: np.asarray(m, dtype=np.float64) * unit for name, m in seed["gram"].items()}
    cross = {name: np.asarray(m, dtype=np.float64) * unit for name, m in seed["cross"].items()}
    return gram, cross


def estimates(record: dict[str, Any]) -> dict[str, dict[str, list[Estimate]]]:
    """Per setting, per figure, one jackknife estimate per warm start."""
    found: dict[str, dict[str, list[Estimate]]] = {name: {} for name in SETTINGS}
    for seed in record["seeds"].values():
        gram, cross = matrices(seed)
        for name in SETTINGS:
            figures = {
                "cosine": jackknife(mean_loo_cosine, gram[name]),
                "snr": jackknife(snr, gram[name]),
                "offset": Estimate(statistics.fmean(seed["offset_share"][name]), 0.0),
            }
            if name != FINE:
                figures["ratio"] = jackknife(snr_ratio, gram[name], gram[FINE])
                figures["cosine_gain"] = jackknife(cosine_gain, gram[name], gram[FINE])
                figures["steps"] = jackknife(step_ratio, gram[name], gram[FINE])
                figures["direction"] = jackknife(expected_cosine, gram[name], gram[FINE], cross[name])
            for key, estimate in figures.items():
                found[name].setdefault(key, []).append(estimate)
    return found


def shown(estimate: Estimate, digits: int = 3, interval: bool = False) -> str:
    if math.isnan(estimate.value):
        return "-"
    text = f"{estimate.value:.{digits}f}"
    if interval and not math.isnan(estimate.se):
        low, high = estimate.ci95
        return f"{text} [{low:.{digits}f}, {high:.{digits}f}]"
    return text + (f" ({estimate.se:.{digits}f})" if not math.isnan(estimate.se) else "")


def signal_table(record: dict[str, Any]) -> str:
    found = estimates(record)
    seeds = len(record["seeds"])
    lines = [
        [
            "grouping",
            "cosine (SE)",
            "AT-GRPO's cosine minus it [95%]",
            "SNR (SE)",
            "SNR / AT-GRPO's [95%]",
            "1 - offset share (predicted ratio)",
            "steps for AT-GRPO's progress [95%]",
            "cosine of expected gradients [95%]",
        ]
    ]
    for name, label in SETTINGS.items():
        figures = {key: pooled(values) for key, values in found[name].items()}
        coarse = name != FINE
        lines.append(
            [
                label,
                shown(figures["cosine"]),
                shown(figures["cosine_gain"], interval=True) if coarse else "0",
                shown(figures["snr"], 4),
                shown(figures["ratio"], 2, interval=True) if coarse else "1",
                f"{1 - figures['offset'].value:.2f}",
                shown(figures["steps"], 2, interval=True) if coarse else "1",
                shown(figures["direction"], 2, interval=True) if coarse else "1",
            ]
        )
    note = (
        f"\n\nMeans over {seeds} warm starts (seeds {', '.join(record['seeds'])}) of {record['batches']} batches each; "
        "SE and intervals from the jackknife over batches. Steps: cos(g, E g) of `task_role_turn` over the row's "
        "(each sqrt(SNR / (1 + SNR)))."
    )
    return markdown_table(lines) + note


def per_seed_table(record: dict[str, Any]) -> str:
    found = estimates(record)
    seeds = list(record["seeds"])
    lines = [["grouping", *(f"seed {s}: SNR / AT-GRPO's [95%]; AT-GRPO's cosine minus it [95%]" for s in seeds)]]
    for name, label in SETTINGS.items():
        if name != FINE:
            pairs = zip(found[name]["ratio"], found[name]["cosine_gain"], strict=True)
            lines.append([label, *(f"{shown(r, 2, interval=True)}; {shown(c, interval=True)}" for r, c in pairs)])
    return markdown_table(lines)


def checks_text(record: dict[str, Any]) -> str:
    seeds = record["seeds"].values()
    samples = [n for seed in seeds for n in seed["samples"]]
    changed = max(seed["largest_cost_free_change"] for seed in seeds)
    minutes = sum(seed["measurement_s"] + (0 if seed["warm_start_reused"] else seed["warm_start_s"]) for seed in seeds)
    parameters = {seed["parameters"] for seed in seeds}
    return (
        f"{len(samples)} batches of {min(samples)} to {max(samples)} samples, one gradient of "
        f"{', '.join(map(str, sorted(parameters)))} parameters per batch and setting; `task_role` and "
        f"`task_role_turn` advantages moved by at most {changed:.1e} across costs. {minutes / 60:.0f} minutes of "
        f"measurement (the warm starts' training aside when reused) on {record['machine']} ({record['date']})."
    )


def headline(record: dict[str, Any]) -> str:
    """The results table's line: the setting whose leave-one-out cosine falls furthest below AT-GRPO's, with its
    interval and SNR ratio, and `task_role`'s fall beside it."""
    found = estimates(record)
    gains = {name: pooled(found[name]["cosine_gain"]) for name in SETTINGS if name != FINE}
    worst = max(gains, key=lambda name: gains[name].value)
    fine = pooled(found[FINE]["cosine"])
    ratio = pooled(found[worst]["ratio"])
    return (
        f"batch-gradient cosine {fine.value:.3f} under AT-GRPO; {SETTINGS[worst]} "
        f"{shown(gains[worst], interval=True)} lower (SNR {shown(ratio, 2, interval=True)} of AT-GRPO's); "
        f"`task_role` {shown(gains['task_role'], interval=True)} lower"
    )


def tables() -> dict[str, str]:
    record = load()
    return {
        "signal": signal_table(record),
        "per_seed": per_seed_table(record),
        "checks": checks_text(record),
        "headline": headline(record),
    }
