"""Paired statistics over seeds: the 95% t quantile, the mean, standard error and 95% t interval of paired
differences, their paired t p-value and Holm's correction, and their text and Markdown tables."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom; beyond 30 the normal's 1.96.
T_95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
T_95 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile_95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom (>= 1)."""
    if df < 1:
        raise ValueError(f"a t quantile needs at least 1 degree of freedom, got {df}")
    return T_95[df - 1] if df <= len(T_95) else 1.96


@dataclass(frozen=True)
class PairedSummary:
    """Paired differences (one per seed) summarised: their mean, its standard error and 95% t interval; the SE and
    interval are None below two differences, the mean with none."""

    per_seed: tuple[float, ...]
    mean: float | None
    se: float | None
    ci95: tuple[float, float] | None

    @property
    def n(self) -> int:
        return len(self.per_seed)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: n, per_seed, mean, se and ci95 (lists, not tuples)."""
        ci95 = list(self.ci95) if self.ci95 is not None else None
        return {"n": self.n, "per_seed": list(self.per_seed), "mean": self.mean, "se": self.se, "ci95": ci95}

    def text(self) -> str:
        """ "mean (SE) [95% interval]", leaving out what it lacks; "-" without a mean."""
        return estimate_text(self.mean, self.se, self.ci95)


def paired_summary(differences: Sequence[float]) -> PairedSummary:
    """Mean, standard error (sample std / sqrt n) and mean +- t(n-1) * SE of paired differences."""
    values = tuple(float(value) for value in differences)
    broken = [index for index, value in enumerate(values) if not math.isfinite(value)]
    if broken:
        raise ValueError(f"paired differences must be finite numbers; not at position(s) {broken}: {values}")
    n = len(values)
    mean = statistics.fmean(values) if n else None
    se = statistics.stdev(values) / n**0.5 if n > 1 else None
    if mean is None or se is None:
        return PairedSummary(values, mean, se, None)
    half = t_quantile_95(n - 1) * se
    return PairedSummary(values, mean, se, (mean - half, mean + half))


def paired_by_seed(values: Mapping[int, float | None], baseline: Mapping[int, float | None]) -> PairedSummary:
    """`paired_summary` of each seed's value minus the baseline's on that seed, over the seeds where both have one
    (in the order of `values`)."""
    pairs = [(value, baseline.get(seed)) for seed, value in values.items()]
    return paired_summary([value - base for value, base in pairs if value is not None and base is not None])


def difference_summary(differences: Sequence[float]) -> dict[str, Any]:
    """`paired_summary` in its JSON form (n, per_seed, mean, se, ci95): what a study's data keep."""
    return paired_summary(differences).as_dict()


def summary_text(summary: Mapping[str, Any]) -> str:
    """A summary in its JSON form (`difference_summary`) as `PairedSummary.text` shows it."""
    return estimate_text(summary["mean"], summary["se"], summary["ci95"])


def estimate_text(mean: float | None, se: float | None, ci95: Sequence[float] | None) -> str:
    """ "mean (SE) [95% interval]", leaving out what is missing; "-" without a mean."""
    if mean is None:
        return "-"
    return mean_se_text(mean, se) + (f" {interval_text(ci95)}" if ci95 else "")


def number(value: float | None, signed: bool = False) -> str:
    """`value` to three decimals (with its sign when `signed`), or "-" for a figure that is missing."""
    return "-" if value is None else (f"{value:+.3f}" if signed else f"{value:.3f}")


def interval_text(ci95: Sequence[float] | None) -> str:
    """A 95% interval as "[low, high]", or "-" for none."""
    return "-" if ci95 is None else f"[{ci95[0]:+.3f}, {ci95[1]:+.3f}]"


def mean_se_text(mean: float | None, se: float | None) -> str:
    """ "mean (SE)", the SE left out where there is none; "-" without a mean."""
    return number(mean, signed=True) + (f" ({number(se)})" if mean is not None and se is not None else "")


def markdown_table(lines: Sequence[Sequence[str]]) -> str:
    """A header line and rows of cells as a Markdown table (pipes inside cells escaped)."""
    escaped = [[str(cell).replace("|", "\\|") for cell in line] for line in lines]
    rows = ["| " + " | ".join(line) + " |" for line in escaped]
    return "\n".join([rows[0], "|" + "---|" * len(lines[0]), *rows[1:]])


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with integer `df` >= 1, by the closed-form sums over cos(theta) (no special
    functions needed): theta = atan(|t| / sqrt(df))."""
    if df < 1:
        raise ValueError(f"a t p-value needs at least 1 degree of freedom, got {df}")
    if math.isnan(t):  # a NaN reading would otherwise read as p = 0, the most significant of all
        raise ValueError("a t p-value of NaN: some difference is not a number")
    theta = math.atan(abs(t) / math.sqrt(df))
    cos2 = math.cos(theta) ** 2
    if df % 2:  # odd: 2/pi * (theta + sin * cos * (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        term, series = 1.0, 1.0
        for k in range(1, (df - 1) // 2):
            term *= 2 * k / (2 * k + 1) * cos2
            series += term
        inside = 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * series if df > 1 else 0.0))
    else:  # even: sin * (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        term, series = 1.0, 1.0
        for k in range(1, df // 2):
            term *= (2 * k - 1) / (2 * k) * cos2
            series += term
        inside = math.sin(theta) * series
    return min(1.0, max(0.0, 1.0 - inside))


def paired_p_value(summary: PairedSummary) -> float | None:
    """The two-sided p-value of a paired t test that the differences' mean is 0; None below two differences. A zero SE
    gives 1 for a zero mean and 0 otherwise."""
    if summary.mean is None or summary.se is None:
        return None
    if summary.se == 0:
        return 1.0 if summary.mean == 0 else 0.0
    return t_two_sided_p(summary.mean / summary.se, summary.n - 1)


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of m p-values, in their given order: the i-th smallest times (m - i + 1), made
    monotone and capped at 1. An adjusted p below alpha rejects at family-wise error alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda index: p_values[index])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
