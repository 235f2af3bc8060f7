"""Paired statistics for research tables: the product's (`verl_mas.stats`), each summary as the dict studies keep."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verl_mas.stats import interval_text, markdown_table, mean_se_text, number, paired_summary, t_quantile_95

__all__ = [
    "difference_summary",
    "interval_text",
    "markdown_table",
    "mean_se_text",
    "number",
    "summary_text",
    "t_quantile_95",
]


def difference_summary(differences: Sequence[float]) -> dict[str, Any]:
    """Mean, standard error and 95% t interval of paired differences (None where n is too small), as JSON: n,
    per_seed, mean, se, ci95."""
    return paired_summary(differences).as_dict()


def summary_text(summary: dict[str, Any]) -> str:
    """A `difference_summary` as "mean (SE) [95% interval]", leaving out what it lacks; "-" without a mean."""
    if summary["mean"] is None:
        return "-"
    ci = summary["ci95"]
    return mean_se_text(summary["mean"], summary["se"]) + (f" {interval_text(ci)}" if ci else "")
