"""How well batch gradients agree with their expectation, from their Gram matrix: leave-one-out cosine, the
signal-to-noise ratio with its finite-sample correction, paired ratios, and jackknife standard errors.

Every statistic reads the B x B matrix of inner products g_b . g_c of one setting's batch gradients (and, for two
groupings on the same batches, their cross products), never the gradients: the Gram matrix is all the page keeps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Z_95 = 1.96  # jackknife intervals: mean +- 1.96 SE (64 batches: t's quantile would be 2.00)


def _checked(gram: np.ndarray) -> np.ndarray:
    gram = np.asarray(gram, dtype=np.float64)
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or gram.shape[0] < 2:
        raise ValueError(f"a Gram matrix of at least 2 batches is square, got shape {gram.shape}")
    return gram


def signal(gram: np.ndarray) -> float:
    """||E g||^2 estimated without bias: the mean over pairs b != c of g_b . g_c (= ||mean||^2 - s^2 / B)."""
    gram = _checked(gram)
    b = gram.shape[0]
    return float((gram.sum() - np.trace(gram)) / (b * (b - 1)))


def noise(gram: np.ndarray) -> float:
    """E||g - E g||^2 estimated without bias: sum_b ||g_b - mean||^2 / (B - 1)."""
    gram = _checked(gram)
    b = gram.shape[0]
    return float(max(np.trace(gram) - gram.sum() / b, 0.0) / (b - 1))


def snr(gram: np.ndarray) -> float:
    """signal / noise; +inf for equal nonzero gradients (no noise), nan when every gradient is zero."""
    s, n = signal(gram), noise(gram)
    if n > 1e-12 * max(float(np.trace(_checked(gram))), 1e-300):
        return s / n
    return math.inf if s > 0 else math.nan


def loo_cosines(gram: np.ndarray) -> np.ndarray:
    """[B] cos(g_b, mean of the other batches' gradients); nan where either vector is zero."""
    gram = _checked(gram)
    rows, total, diagonal = gram.sum(axis=1), gram.sum(), np.diag(gram)
    others_sq = total - 2 * rows + diagonal  # ||S - g_b||^2, S the sum of all B gradients
    denominator = np.sqrt(np.clip(diagonal, 0, None) * np.clip(others_sq, 0, None))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (rows - diagonal) / denominator, np.nan)


def mean_loo_cosine(gram: np.ndarray) -> float:
    return float(np.mean(loo_cosines(gram)))


def cosine_gain(gram: np.ndarray, reference: np.ndarray) -> float:
    """mean_loo_cosine(reference) - mean_loo_cosine(gram), the same batches under two groupings."""
    return mean_loo_cosine(reference) - mean_loo_cosine(gram)


def snr_ratio(gram: np.ndarray, reference: np.ndarray) -> float:
    """snr(gram) / snr(reference), the same batches under two groupings."""
    return snr(gram) / snr(reference)


def expected_cosine(gram: np.ndarray, reference: np.ndarray, cross: np.ndarray) -> float:
    """The cosine between two groupings' expected gradients, from unbiased pair means; `cross[b, c]` = g_b . h_c."""
    cross = np.asarray(cross, dtype=np.float64)
    b = cross.shape[0]
    between = (cross.sum() - np.trace(cross)) / (b * (b - 1))
    scale = signal(gram) * signal(reference)
    return float(between / math.sqrt(scale)) if scale > 0 else math.nan


@dataclass(frozen=True)
class Estimate:
    """A statistic on all batches, its jackknife standard error over batches and its 95% interval."""

    value: float
    se: float

    @property
    def ci95(self) -> tuple[float, float]:
        return (self.value - Z_95 * self.se, self.value + Z_95 * self.se)


def jackknife(statistic: Callable[..., float], *matrices: np.ndarray) -> Estimate:
    """`statistic(*matrices)` and its delete-one-batch jackknife SE: batch j is removed from the rows and columns of
    every matrix together (the groupings' gradients of one batch share its samples)."""
    matrices = tuple(np.asarray(m, dtype=np.float64) for m in matrices)
    b = matrices[0].shape[0]
    if b < 3:
        raise ValueError(f"the jackknife needs at least 3 batches, got {b}")
    value = statistic(*matrices)
    keep = ~np.eye(b, dtype=bool)
    deleted = np.array([statistic(*(m[keep[j]][:, keep[j]] for m in matrices)) for j in range(b)])
    if not np.all(np.isfinite(deleted)):
        return Estimate(value, math.nan)
    se = math.sqrt((b - 1) / b * float(((deleted - deleted.mean()) ** 2).sum()))
    return Estimate(value, se)


def pooled(estimates: list[Estimate]) -> Estimate:
    """The mean of independent estimates (one per warm start) and its SE."""
    n = len(estimates)
    return Estimate(
        sum(e.value for e in estimates) / n, math.sqrt(sum(e.se**2 for e in estimates)) / n if n else math.nan
    )


def cosine_to_expected(gram: np.ndarray) -> float:
    """cos(g, E g) as E[g . E g] / (sqrt(E||g||^2) ||E g||) = sqrt(SNR / (1 + SNR)); 0 when the SNR is <= 0."""
    ratio = snr(gram)
    if math.isnan(ratio):
        return math.nan
    return 1.0 if math.isinf(ratio) else math.sqrt(max(ratio, 0.0) / (1.0 + max(ratio, 0.0)))


def step_ratio(gram: np.ndarray, reference: np.ndarray) -> float:
    """How many steps of a fixed size `gram`'s grouping takes for the progress one of `reference`'s makes along the
    expected gradient: cosine_to_expected(reference) / cosine_to_expected(gram)."""
    coarse = cosine_to_expected(gram)
    return cosine_to_expected(reference) / coarse if coarse != 0 else math.inf
