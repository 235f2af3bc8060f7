"""research.lora_learning.figures: the L2 pilots' selection rules and the third pilot's repeat check, on hand-made
records against hand-computed values."""

import pytest

from research.lora_learning import figures


def pilot_arm(lr: float, sampled_after: str, greedy_after: str) -> dict:
    """An arm on 8 boards: before, every board read 0 sampled (0 of 2) and half of them solved greedily."""
    before = {"greedy": "11110000", "sampled": "00000000"}
    return {
        "lr": lr,
        "rank": 8,
        "board_results": {"0": before, "100": {"greedy": greedy_after, "sampled": sampled_after}},
    }


def test_the_pilots_rule_takes_the_smaller_lr_that_gains_without_a_greedy_fall():
    def record(*arms):
        named = {f"lr {arm['lr']:g}": arm for arm in arms}
        boards = {name: arm["board_results"] for name, arm in named.items()}
        return {"board_results": boards, "sampled_episodes_per_board": 2, "arms": named, "budget": 100}

    gains = pilot_arm(3e-3, "22221111", "11110000")  # sampled +0.75 a board, greedy unchanged
    falls = pilot_arm(1e-3, "22221111", "00000000")  # the same sampled gain, greedy 4 of 8 boards lost: z = -2.6
    assert figures.pilot_choice(record(falls, gains)) == "lr 0.003"
    learns = pilot_arm(1e-3, "22221110", "11110000")
    assert figures.pilot_choice(record(gains, learns)) == "lr 0.001"  # the smaller lr, whatever the order
    flat = pilot_arm(1e-3, "10000000", "11110000")  # +0.0625, se 0.0625: z = 1
    reference = pilot_arm(3e-4, "22221111", "11110000")  # learns, but is outside the selection
    with pytest.raises(LookupError, match="lr 0.003 was not run"):  # 1e-3 does not learn and 3e-3 is missing
        figures.pilot_choice(record(flat, reference))
    assert figures.pilot_choice(record(learns, reference)) == "lr 0.001"  # 1e-3 learns: 3e-3 is not needed
    assert figures.pilot_choice(record(flat, falls | {"lr": 3e-3})) is None  # both run, neither meets the rule


def test_a_longer_pilot_is_checked_against_the_shorter_ones_arm_at_the_same_setting():
    def arm(lr, readings):
        return {"lr": lr, "rank": 8, "board_results": readings}

    start = {"greedy": "1100", "sampled": "2100"}
    earlier = {"arms": {"a": arm(1e-3, {"0": start, "100": {"greedy": "1110", "sampled": "2211"}})}}
    later = {
        "arms": {
            "lr 0.001": arm(1e-3, {"0": start, "100": {"greedy": "1010", "sampled": "2211"}, "200": start}),
            "lr 0.0003": arm(3e-4, {"0": start}),  # the shorter pilot has no arm at this lr: no check
        }
    }
    assert figures.repeat_differences(later, earlier) == {"lr 0.001": {0: "0/0", 100: "1/0"}}


def test_the_third_pilots_rule_chooses_among_its_own_lrs():
    def arm(lr, sampled_after):  # 8 boards, half solved greedily before and after; sampled 0 of 2 before
        before = {"greedy": "11110000", "sampled": "00000000"}
        return {
            "lr": lr,
            "rank": 8,
            "board_results": {"0": before, "200": {"greedy": "11110000", "sampled": sampled_after}},
        }

    def pilot(*arms):
        named = {f"lr {a['lr']:g}": a for a in arms}
        boards = {name: a["board_results"] for name, a in named.items()}
        return {"board_results": boards, "sampled_episodes_per_board": 2, "arms": named, "budget": 200}

    learns, flat = "22221111", "10000000"  # gains 1 or 1/2 a board: z = 0.75 / 0.094 = 8; z = 1
    assert figures.pilot_choice(pilot(arm(3e-4, learns), arm(1e-3, learns)), figures.PILOT3_LRS) == "lr 0.0003"
    assert figures.pilot_choice(pilot(arm(3e-4, flat), arm(1e-3, learns)), figures.PILOT3_LRS) == "lr 0.001"
    with pytest.raises(LookupError, match="lr 0.001 was not run"):  # 3e-4 does not learn, 1e-3 unfinished
        figures.pilot_choice(pilot(arm(3e-4, flat)), figures.PILOT3_LRS)
    assert figures.pilot_choice(pilot(arm(3e-4, learns)), figures.PILOT3_LRS) == "lr 0.0003"  # 1e-3 not needed


def test_an_arm_is_named_by_its_modules_only_where_they_are_not_the_presets():
    assert figures.arm_label({"lr": 1e-3, "rank": 8}) == "lr 0.001, rank 8"  # records before the fourth design
    attention = {"lr": 1e-3, "rank": 8, "target_modules": list(figures.ATTENTION)}
    assert figures.arm_label(attention) == "lr 0.001, rank 8"
    mlp = {"lr": 1e-3, "rank": 8, "target_modules": list(figures.MLP_TARGETS)}
    assert figures.arm_label(mlp) == "lr 0.001, rank 8, q_proj k_proj v_proj o_proj gate_proj up_proj down_proj"


def test_the_fourth_pilots_start_is_checked_board_by_board_against_the_thirds(monkeypatch):
    start = {"greedy": "1100", "sampled": "2100"}
    records = {
        "third": {"arms": {"lr 0.0003, rank 8": {"board_results": {"0": start}}}},
        "fourth": {
            "arms": {
                "same": {"lr": 1e-3, "rank": 8, "board_results": {"0": start}},
                "moved": {"lr": 3e-3, "rank": 8, "board_results": {"0": {"greedy": "1000", "sampled": "2111"}}},
            }
        },
    }
    monkeypatch.setattr(figures, "read", records.__getitem__)
    table = figures.same_start_table("fourth", "third")
    assert "| lr 0.001, rank 8 | 0/0 |" in table
    assert "| lr 0.003, rank 8 | 1/2 |" in table  # one greedy board and two sampled boards differ
