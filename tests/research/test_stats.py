"""research/stats.py: paired summaries and their text, against values worked out by hand."""

from research.stats import difference_summary, summary_text, t_quantile_95


def test_paired_difference_of_one_seed_has_no_interval():
    assert difference_summary([0.25]) == {"n": 1, "per_seed": [0.25], "mean": 0.25, "se": None, "ci95": None}
    assert t_quantile_95(1) == 12.706 and t_quantile_95(7) == 2.365
    assert t_quantile_95(40) == 1.96


def test_summary_text_shows_what_a_difference_summary_has():
    assert summary_text(difference_summary([0.25, -0.5])).startswith("-0.125 (0.375) [-4.89")
    assert summary_text(difference_summary([0.5, 0.5])) == "+0.500 (0.000) [+0.500, +0.500]"
    assert summary_text(difference_summary([0.2])) == "+0.200"  # one value: no spread
    assert summary_text(difference_summary([])) == "-"
