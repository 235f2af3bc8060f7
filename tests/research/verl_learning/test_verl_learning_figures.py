"""research.verl_learning.figures: the replication's figures on hand-made records, against hand-computed values."""

import json

import pytest

from research.verl_learning import figures


def record(local: dict[str, str], verl: dict[str, str], step: int = 100) -> dict:
    """Four boards; at step 0 (the warm start, both engines) greedy solves boards 0-1, sampled reads 2/2, 1/2, 0, 0."""
    start = {"greedy": "1100", "sampled": "2100"}
    return {
        "sampled_episodes_per_board": 2,
        "board_results": {"local": {"0": start, str(step): local}, "verl": {"0": start, str(step): verl}},
    }


# local: sampled 1, 1, 1/2, 1/2 at step 100 (gains 0, 1/2, 1/2, 1/2); verl: 1, 1, 0, 0 (gains 0, 1/2, 0, 0)
LOCAL = {"greedy": "1110", "sampled": "2211"}
VERL = {"greedy": "1100", "sampled": "2200"}


def test_the_sampled_gain_splits_into_boards_unsolved_and_solved_greedily_before_and_adds_up():
    split = figures.gain_split(record(LOCAL, VERL), "local", 100)
    assert split["total"]["mean"] == pytest.approx(0.375)
    assert split["new"]["mean"] == pytest.approx(0.25)  # boards 2 and 3, greedy 0 before: (1/2 + 1/2) / 4
    assert split["solved"]["mean"] == pytest.approx(0.125)  # board 1 (board 0 was 2/2 already): (1/2) / 4
    # each part is a mean over all four boards: its SE is the SE of [0, 0, 1/2, 1/2]
    assert split["new"]["se"] == pytest.approx((4 * 0.25**2 / 3) ** 0.5 / 2)
    verl = figures.gain_split(record(LOCAL, VERL), "verl", 100)
    assert (verl["total"]["mean"], verl["new"]["mean"], verl["solved"]["mean"]) == pytest.approx((0.125, 0.0, 0.125))


def test_seed_readings_are_each_figures_per_board_mean_per_seed():
    records = {0: record(LOCAL, VERL), 1: record(VERL, LOCAL)}  # seed 1: the engines' readings swapped
    readings = figures.seed_readings(records, 100)
    assert readings["verl, sampled"] == pytest.approx({0: 0.125, 1: 0.375})
    assert readings["local, sampled, on boards unsolved greedily before RL"] == pytest.approx({0: 0.25, 1: 0.0})
    assert readings["verl, greedy"] == pytest.approx({0: 0.0, 1: 0.25})  # 1100 -> 1110: board 2 gained
    assert readings["verl - local, sampled"] == pytest.approx({0: -0.25, 1: 0.25})


def test_the_mean_over_seeds_takes_a_t_interval_with_n_minus_1_degrees_of_freedom():
    routers = {"per_role": {0: record(LOCAL, VERL), 1: record(VERL, LOCAL)}}
    table = figures.replication_mean_table(routers)
    # verl's sampled gains 0.125 and 0.375: mean 0.25, SE 0.125, t(1) = 12.706: [-1.338, +1.838]
    row = next(line for line in table.splitlines() if "| verl, sampled |" in line)
    assert "0: +0.125, 1: +0.375" in row and "+0.250 (0.125) [-1.338, +1.838]" in row
    assert "interim: seed 2 not run" in row
    gaps = figures.replication_gap_table(routers)
    assert "| `per_role` | 0 | -0.250 (0.144) [-0.709, +0.209] |" in gaps  # t(3) = 3.182 over four boards
    assert "| `per_role` | mean of 2 [95% t] | +0.000 (0.250) [-3.176, +3.176] |" in gaps  # 12.706 x 0.25


def test_the_bar_needs_every_seed_and_an_interval_above_zero():
    assert figures.replication_bar({0: 0.1, 1: 0.2}) == "interim: seed 2 not run"
    # mean 0.2, SE 0.1 / sqrt(3), t(2) = 4.303: low end 0.2 - 0.248 < 0
    assert figures.replication_bar({0: 0.1, 1: 0.2, 2: 0.3}) == "**does not hold**"
    assert figures.replication_bar({0: 0.30, 1: 0.30, 2: 0.31}) == "**holds**"


def test_replication_records_are_found_by_seed_and_missing_runs_are_named(tmp_path):
    (tmp_path / "per_role.json").write_text(json.dumps(record(LOCAL, VERL)))
    (tmp_path / "per_role_seed2.json").write_text(json.dumps(record(VERL, LOCAL)))
    (tmp_path / "per_role_pilot_seed3.json").write_text("{}")  # not a replication seed's record
    found = figures.seed_records("per_role", tmp_path)
    assert sorted(found) == [0, 2]
    note = figures.replication_note({"per_role": found, "shared": {}})
    assert "`per_role` 2 (seed 0, 2)" in note
    assert "**Interim**: not yet run: `per_role` seed 1, `shared` seed 0, `shared` seed 1, `shared` seed 2." in note


def test_each_seeds_row_shows_its_warm_start_and_its_changes():
    table = figures.replication_seed_table({"per_role": {1: record(LOCAL, VERL)}})
    # step 0: sampled (1 + 1/2) / 4 = 0.375, greedy 2 / 4; local at 100: sampled +0.375, split +0.250 / +0.125
    row = next(line for line in table.splitlines() if "| local |" in line)
    assert row.startswith("| `per_role` | 1 | local | 0.375 / 0.500 | +0.375 (")
    assert row.endswith("| +0.250 (0.144) | +0.125 (0.125) |")
