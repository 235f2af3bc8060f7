"""verl_mas.stats: the t quantile and paired summaries against values worked out by hand."""

import math

import pytest

from verl_mas.stats import (
    PairedSummary,
    difference_summary,
    holm_adjusted,
    interval_text,
    markdown_table,
    number,
    paired_by_seed,
    paired_p_value,
    paired_summary,
    summary_text,
    t_quantile_95,
    t_two_sided_p,
)


def test_t_quantile_reads_the_table_and_falls_back_to_the_normal_past_30():
    assert t_quantile_95(1) == 12.706
    assert t_quantile_95(2) == 4.303
    assert t_quantile_95(7) == 2.365
    assert t_quantile_95(30) == 2.042
    assert t_quantile_95(31) == 1.96
    with pytest.raises(ValueError, match="at least 1 degree of freedom, got 0"):
        t_quantile_95(0)


def test_paired_summary_of_three_seeds_by_hand():
    # mean 0.2; deviations -0.1, +0.1, 0: sample variance 0.02 / 2 = 0.01, std 0.1, SE 0.1 / sqrt(3) = 0.0577350;
    # half width t(2) * SE = 4.303 * 0.0577350 = 0.2484339
    summary = paired_summary([0.1, 0.3, 0.2])
    assert summary.n == 3
    assert summary.mean == pytest.approx(0.2)
    assert summary.se == pytest.approx(0.0577350, abs=1e-7)
    assert summary.ci95 == pytest.approx((0.2 - 0.2484339, 0.2 + 0.2484339), abs=1e-7)
    assert summary.text() == "+0.200 (0.058) [-0.048, +0.448]"


def test_paired_summary_of_four_seeds_by_hand():
    # mean 2.5; squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, variance 5 / 3, SE sqrt(5/3) / 2 = 0.6454972;
    # half width 3.182 * 0.6454972 = 2.0539720
    summary = paired_summary([4, 1, 3, 2])
    assert summary.se == pytest.approx(math.sqrt(5 / 3) / 2)
    assert summary.ci95 == pytest.approx((2.5 - 2.0539720, 2.5 + 2.0539720), abs=1e-6)
    assert summary.as_dict() == {
        "n": 4,
        "per_seed": [4.0, 1.0, 3.0, 2.0],
        "mean": 2.5,
        "se": summary.se,
        "ci95": list(summary.ci95),
    }


def test_too_few_differences_give_no_spread_and_none_no_mean():
    assert paired_summary([0.25]) == PairedSummary((0.25,), 0.25, None, None)
    assert paired_summary([0.25]).text() == "+0.250"
    assert paired_summary([]) == PairedSummary((), None, None, None)
    assert paired_summary([]).text() == "-"
    assert paired_summary([]).as_dict() == {"n": 0, "per_seed": [], "mean": None, "se": None, "ci95": None}


def test_identical_differences_have_a_zero_width_interval():
    assert paired_summary([0.5, 0.5]).text() == "+0.500 (0.000) [+0.500, +0.500]"


def test_text_helpers():
    assert number(None) == "-" and number(0.1234) == "0.123" and number(0.1234, signed=True) == "+0.123"
    assert interval_text(None) == "-" and interval_text((-0.01, 0.02)) == "[-0.010, +0.020]"
    assert markdown_table([["a", "b|c"], ["1", "2"]]) == "| a | b\\|c |\n|---|---|\n| 1 | 2 |"


@pytest.mark.parametrize("df, t", [(1, 12.706), (2, 4.303), (4, 2.776), (7, 2.365), (15, 2.131), (30, 2.042)])
def test_t_p_value_at_the_tabled_95_quantiles_is_five_percent(df, t):
    assert t_two_sided_p(t, df) == pytest.approx(0.05, abs=2e-4)
    assert t_two_sided_p(-t, df) == t_two_sided_p(t, df)


def test_t_p_value_closed_forms_by_hand():
    assert t_two_sided_p(1.0, 1) == pytest.approx(0.5)  # 1 - 2/pi * atan(1)
    assert t_two_sided_p(1.0, 2) == pytest.approx(1 - 1 / 3**0.5)  # 1 - t / sqrt(2 + t^2)
    assert t_two_sided_p(0.0, 5) == pytest.approx(1.0)
    assert t_two_sided_p(1e6, 3) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="degree of freedom"):
        t_two_sided_p(1.0, 0)
    with pytest.raises(ValueError, match="NaN"):
        t_two_sided_p(math.nan, 3)
    with pytest.raises(ValueError, match=r"finite numbers; not at position\(s\) \[1\]"):
        paired_summary([0.1, math.nan, 0.2])


def test_paired_p_value_of_hand_made_differences():
    # mean 0.1, SE sqrt(0.02 / 3) / 2, so t = sqrt(6) on 3 df; theta = atan(sqrt(2)), sin * cos = sqrt(2) / 3:
    # p = 1 - 2 / pi * (atan(sqrt(2)) + sqrt(2) / 3) = 0.0917
    summary = paired_summary([0.0, 0.1, 0.2, 0.1])
    expected = 1 - 2 / math.pi * (math.atan(2**0.5) + 2**0.5 / 3)
    assert expected == pytest.approx(0.0917, abs=1e-4)
    assert paired_p_value(summary) == pytest.approx(expected)
    assert t_two_sided_p(2.0, 3) == pytest.approx(0.1393, abs=1e-4)  # the t table
    assert paired_p_value(paired_summary([0.2, 0.2])) == 0.0
    assert paired_p_value(paired_summary([0.0, 0.0])) == 1.0
    assert paired_p_value(paired_summary([0.3])) is None


def test_holm_adjustment_by_hand():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> raised to 0.06 (monotone)
    assert holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm_adjusted([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm_adjusted([]) == []


def test_a_difference_summary_of_one_seed_has_no_interval():
    assert difference_summary([0.25]) == {"n": 1, "per_seed": [0.25], "mean": 0.25, "se": None, "ci95": None}


def test_summary_text_shows_what_a_difference_summary_has():
    assert summary_text(difference_summary([0.25, -0.5])).startswith("-0.125 (0.375) [-4.89")
    assert summary_text(difference_summary([0.5, 0.5])) == "+0.500 (0.000) [+0.500, +0.500]"
    assert summary_text(difference_summary([0.2])) == "+0.200"  # one value: no spread
    assert summary_text(difference_summary([])) == "-"


def test_paired_by_seed_pairs_only_the_seeds_where_both_have_a_value():
    # seed 3 lacks a baseline, seed 2 a value, seed 7 is the baseline's alone: 0.5 - 0.25 and 0.25 - 0.5 remain
    values = {0: 0.5, 1: 0.25, 2: None, 3: 0.75}
    baseline = {0: 0.25, 1: 0.5, 2: 0.5, 7: 0.0}
    summary = paired_by_seed(values, baseline)
    assert summary.per_seed == (0.25, -0.25) and summary.mean == 0.0
    assert summary.se == pytest.approx(0.25)  # std 0.25 * sqrt(2), over sqrt(2)
    assert paired_by_seed({0: 0.5}, {1: 0.5}).mean is None
