"""Paired statistics and their text: mean, standard error, 95% t interval, and the cells research tables print."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom; beyond 30 the normal's 1.96.
T_95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
T_95 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile_95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom (>= 1)."""
    if df < 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, got {df}")
    return T_95[df - 1] if df <= len(T_95) else 1.96


def difference_summary(differences: Sequence[float]) -> dict[str, Any]:
    """Mean, standard error and 95% t interval of paired differences (None where n is too small)."""
    differences = list(differences)
    n = len(differences)
    mean = statistics.fmean(differences) if n else None
    se = statistics.stdev(differences) / n**0.5 if n > 1 else None
    half = t_quantile_95(n - 1) * se if se is not None else None
    return {
        "n": n,
        "per_seed": differences,
        "mean": mean,
        "se": se,
        "ci95": [mean - half, mean + half] if half is not None else None,
    }


def number(value: float | None, signed: bool = False) -> str:
    """`value` to three decimals (with its sign when `signed`), or "-" for a figure that is missing."""
    return "-" if value is None else (f"{value:+.3f}" if signed else f"{value:.3f}")


def interval_text(ci95: Sequence[float] | None) -> str:
    """A 95% interval as "[low, high]", or "-" for none."""
    return "-" if ci95 is None else f"[{ci95[0]:+.3f}, {ci95[1]:+.3f}]"


def mean_se_text(mean: float | None, se: float | None) -> str:
    """ "mean (SE)", the SE left out where there is none; "-" without a mean."""
    return number(mean, signed=True) + (f" ({number(se)})" if mean is not None and se is not None else "")


def summary_text(summary: dict[str, Any]) -> str:
    """A `difference_summary` as "mean (SE) [95% interval]", leaving out what it lacks; "-" without a mean."""
    if summary["mean"] is None:
        return "-"
    ci = summary["ci95"]
    return mean_se_text(summary["mean"], summary["se"]) + (f" {interval_text(ci)}" if ci else "")


def markdown_table(lines: Sequence[Sequence[str]]) -> str:
    """A header line and rows of cells as a Markdown table (pipes inside cells escaped)."""
    escaped = [[str(cell).replace("|", "\\|") for cell in line] for line in lines]
    rows = ["| " + " | ".join(line) + " |" for line in escaped]
    return "\n".join([rows[0], "|" + "---|" * len(lines[0]), *rows[1:]])
