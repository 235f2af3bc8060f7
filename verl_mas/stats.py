"""Paired statistics over seeds: the 95% t quantile, the mean, standard error and 95% t interval of paired
differences, and their text and Markdown tables."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
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
        if self.mean is None:
            return "-"
        return mean_se_text(self.mean, self.se) + (f" {interval_text(self.ci95)}" if self.ci95 else "")


def paired_summary(differences: Sequence[float]) -> PairedSummary:
    """Mean, standard error (sample std / sqrt n) and mean +- t(n-1) * SE of paired differences."""
    values = tuple(float(value) for value in differences)
    n = len(values)
    mean = statistics.fmean(values) if n else None
    se = statistics.stdev(values) / n**0.5 if n > 1 else None
    if mean is None or se is None:
        return PairedSummary(values, mean, se, None)
    half = t_quantile_95(n - 1) * se
    return PairedSummary(values, mean, se, (mean - half, mean + half))


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
