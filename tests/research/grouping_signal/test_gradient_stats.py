"""research.grouping_signal.gradient_stats on hand-made gradients: identical, pure noise, known signal and noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from research.grouping_signal.gradient_stats import (
    Estimate,
    cosine_gain,
    cosine_to_expected,
    expected_cosine,
    jackknife,
    loo_cosines,
    mean_loo_cosine,
    noise,
    pooled,
    signal,
    snr,
    snr_ratio,
    step_ratio,
)


def gram(vectors: np.ndarray) -> np.ndarray:
    return vectors @ vectors.T


def test_identical_gradients_agree_fully_and_have_no_noise() -> None:
    g = gram(np.tile([3.0, 4.0], (5, 1)))
    assert loo_cosines(g) == pytest.approx([1.0] * 5)
    assert signal(g) == pytest.approx(25.0) and noise(g) == pytest.approx(0.0, abs=1e-12)
    assert snr(g) == math.inf and cosine_to_expected(g) == 1.0
    assert math.isnan(snr(np.zeros((4, 4))))  # all-zero gradients: no direction at all


def test_hand_computed_signal_noise_and_leave_one_out_cosines() -> None:
    # three batches: mean (1, 1); deviations (1, 0), (-1, 0), (0, 0): s^2 = (1 + 1 + 0) / 2 = 1
    vectors = np.array([[2.0, 1.0], [0.0, 1.0], [1.0, 1.0]])
    g = gram(vectors)
    # pairs b != c: (2*0+1) + (2*1+1) + (0*1+1) = 1 + 3 + 1 = 5, over 3 pairs = 5/3 = ||m||^2 - s^2/B = 2 - 1/3
    assert signal(g) == pytest.approx(5 / 3)
    assert noise(g) == pytest.approx(1.0)
    assert snr(g) == pytest.approx(5 / 3)
    # batch 0 against the mean of the others, (0.5, 1): (1 + 1) / (sqrt(5) sqrt(1.25)) = 2 / 2.5
    assert loo_cosines(g)[0] == pytest.approx(0.8)
    assert mean_loo_cosine(g) == pytest.approx(np.mean(loo_cosines(g)))


def test_pure_noise_gives_cosine_near_zero_and_snr_near_zero() -> None:
    rng = np.random.default_rng(0)
    g = gram(rng.standard_normal((64, 2000)))
    assert abs(mean_loo_cosine(g)) < 0.02
    estimate = jackknife(snr, g)
    assert abs(estimate.value) < 3 * estimate.se  # no signal, within the noise of its estimate
    assert estimate.se < 0.01


def test_known_signal_to_noise_is_recovered_without_the_finite_sample_bias() -> None:
    rng = np.random.default_rng(1)
    dimension, batches = 4000, 64
    mu = np.zeros(dimension)
    mu[0] = math.sqrt(0.2 * dimension)  # ||mu||^2 = 0.2 x E||noise||^2: SNR 0.2
    vectors = mu + rng.standard_normal((batches, dimension))
    g = gram(vectors)
    estimate = jackknife(snr, g)
    assert estimate.value == pytest.approx(0.2, abs=3 * estimate.se)
    # the plain ||mean||^2 / s^2 is biased up by 1 / B = 0.016, several SEs here
    naive = (vectors.mean(0) @ vectors.mean(0)) / noise(g)
    assert naive - 0.2 > 2 * estimate.se
    assert cosine_to_expected(g) == pytest.approx(math.sqrt(0.2 / 1.2), abs=0.03)


def test_paired_ratio_and_step_ratio_of_a_noisier_grouping() -> None:
    rng = np.random.default_rng(2)
    mu = np.zeros(3000)
    mu[0] = math.sqrt(0.5 * 3000)
    shared = rng.standard_normal((64, 3000))
    fine = mu + shared
    coarse = mu + shared + math.sqrt(4.0) * rng.standard_normal((64, 3000))  # 5x the noise: SNR 0.1 against 0.5
    ratio = jackknife(snr_ratio, gram(coarse), gram(fine))
    assert ratio.value == pytest.approx(0.2, abs=3 * ratio.se)
    assert ratio.ci95[1] < 1
    steps = step_ratio(gram(coarse), gram(fine))
    assert steps == pytest.approx(math.sqrt(0.5 / 1.5) / math.sqrt(0.1 / 1.1), rel=0.15)
    assert step_ratio(gram(fine), gram(fine)) == pytest.approx(1.0)
    gain = jackknife(cosine_gain, gram(coarse), gram(fine))
    assert gain.ci95[0] > 0 and cosine_gain(gram(fine), gram(fine)) == 0.0


def test_expected_cosine_of_groupings_that_point_the_same_way_or_apart() -> None:
    rng = np.random.default_rng(3)
    base = np.zeros(2000)
    base[0] = 30.0
    other = np.zeros(2000)
    other[1] = 30.0
    noise_a, noise_b = rng.standard_normal((2, 32, 2000))
    same = expected_cosine(gram(base + noise_a), gram(2 * base + noise_b), (base + noise_a) @ (2 * base + noise_b).T)
    apart = expected_cosine(gram(base + noise_a), gram(other + noise_b), (base + noise_a) @ (other + noise_b).T)
    assert same == pytest.approx(1.0, abs=0.05)
    assert apart == pytest.approx(0.0, abs=0.05)


def test_jackknife_of_a_mean_is_the_usual_standard_error() -> None:
    values = np.array([1.0, 4.0, 2.0, 8.0, 5.0])
    # the statistic reads the diagonal of a "Gram" matrix: its mean
    estimate = jackknife(lambda m: float(np.mean(np.diag(m))), np.diag(values))
    assert estimate.value == pytest.approx(4.0)
    assert estimate.se == pytest.approx(np.std(values, ddof=1) / math.sqrt(5))


def test_pooled_estimate_and_refusals() -> None:
    both = pooled([Estimate(1.0, 0.3), Estimate(3.0, 0.4)])
    assert both.value == 2.0 and both.se == pytest.approx(0.25)
    assert both.ci95 == pytest.approx((2.0 - 0.49, 2.0 + 0.49))
    with pytest.raises(ValueError, match="square"):
        snr(np.ones((2, 3)))
    with pytest.raises(ValueError, match="at least 3"):
        jackknife(snr, np.eye(2))
