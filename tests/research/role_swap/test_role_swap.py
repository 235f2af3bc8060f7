"""research.role_swap: the probe's script on a tiny per_role run, and its figures on hand-made readings."""

from __future__ import annotations

import json

import pytest

from research.role_swap import figures, role_swap
from verl_mas.local.presets import resolve_train_config
from verl_mas.local.train import train


def reading(success: float, tool_invalid: float = 0.0, plan_invalid: float = 0.0, episodes: int = 256) -> dict:
    return {"served_by": {}, "success": success, "episodes": episodes,
            "invalid_share": {"tool": tool_invalid, "plan": plan_invalid}}  # fmt: skip


def seed(n: int, greedy: tuple[float, float], sampled: tuple[float, float], run: tuple[float, float]) -> dict:
    return {
        "seed": n, "step": 100, "run_greedy": run[0], "run_sampled": run[1],
        "run_greedy_before": 0.3, "run_sampled_before": 0.25,
        "readings": {
            "greedy": reading(greedy[0], 0.1, 0.2), "greedy_swapped": reading(greedy[1], 0.1, 0.5),
            "sampled": reading(sampled[0], episodes=512), "sampled_swapped": reading(sampled[1], episodes=512),
        },
    }  # fmt: skip


HAND_MADE = [
    seed(0, (0.5, 0.1), (0.4, 0.4), (0.5, 0.42)),
    seed(1, (0.6, 0.3), (0.5, 0.3), (0.6, 0.47)),
    seed(2, (0.4, 0.1), (0.3, 0.2), (0.4, 0.33)),
]


@pytest.fixture
def hand_made(tmp_path, monkeypatch):
    (tmp_path / figures.RESULT_FILE).write_text(json.dumps(HAND_MADE))
    monkeypatch.setattr(figures, "DATA", tmp_path)
    return figures.tables()


def test_the_swap_effect_is_the_paired_difference_with_its_t_interval(hand_made):
    # greedy differences -0.4, -0.3, -0.3: mean -1/3, sd 0.0577, SE 0.0333, half-width 4.303 x SE = 0.143
    assert "| greedy success | 0.500 | 0.167 | -0.333 (0.033) [-0.477, -0.190] |" in hand_made["effect"]
    # sampled differences 0, -0.2, -0.1: mean -0.1, SE 0.0577, half-width 0.248
    assert "| sampled success | 0.400 | 0.300 | -0.100 (0.058) [-0.348, +0.148] |" in hand_made["effect"]
    assert hand_made["headline"].startswith("swapped minus as trained, greedy -0.333 (0.033) [-0.477, -0.190]")
    assert "| `plan` role | +0.300 (0.000) [+0.300, +0.300] | +0.000 (0.000) [+0.000, +0.000] |" in hand_made["invalid"]


def test_each_seed_shows_its_warm_start_its_final_evaluation_and_both_readings(hand_made):
    assert "| 1 | greedy | 0.300 | 0.600 | 0.600 | 0.300 |" in hand_made["readings"]
    assert "| 1 | sampled | 0.250 | 0.470 | 0.500 | 0.300 |" in hand_made["readings"]
    assert hand_made["readings"].endswith("Held-out success at step 100; greedy 256 episodes, sampled 512.")


def test_the_validity_check_needs_exact_greedy_and_close_sampled_readings(hand_made, tmp_path):
    assert hand_made["validity"].startswith("Validity check met.")
    broken = json.loads(json.dumps(HAND_MADE))
    broken[1]["run_greedy"] = 0.59  # one greedy episode apart: the as-trained evaluation is not the run's
    (tmp_path / figures.RESULT_FILE).write_text(json.dumps(broken))
    assert figures.tables()["validity"].startswith("Validity check NOT met: the table is void")
    broken[1]["run_greedy"], broken[2]["run_sampled"] = 0.6, 0.2  # sampled 0.1 apart: beyond the bound
    (tmp_path / figures.RESULT_FILE).write_text(json.dumps(broken))
    assert "NOT met" in figures.tables()["validity"]


def test_the_script_reads_a_per_role_run_as_trained_and_swapped(tmp_path):
    runs = tmp_path / "runs"
    overrides = {"preset": ["smoke", "per_role"], "checkpoint_every": 2, "progress": False}
    train(resolve_train_config({**overrides, "output_dir": str(runs / "seed_0")}), log=lambda _: None)
    role_swap.main(["--seeds", "0", "--collect", "--runs", str(runs), "--out", str(tmp_path / "data")])
    [result] = json.loads((tmp_path / "data" / figures.RESULT_FILE).read_text())
    readings = result["readings"]
    assert readings["greedy"]["served_by"] == readings["sampled"]["served_by"] == {"tool": "tool", "plan": "plan"}
    assert readings["greedy_swapped"]["served_by"] == {"tool": "plan", "plan": "tool"}
    assert (readings["greedy"]["episodes"], readings["sampled"]["episodes"]) == (2, 4)  # smoke: 2 boards, 2 samples
    assert readings["greedy"]["success"] == result["run_greedy"] and result["step"] == 2
    metrics = [json.loads(line) for line in (runs / "seed_0" / "metrics.jsonl").read_text().splitlines()]
    assert (result["run_greedy_before"], result["run_sampled_before"]) == (
        metrics[0]["eval/success"], metrics[0]["eval_sampled/success"]
    )


def test_collect_without_a_run_names_the_folder(tmp_path):
    with pytest.raises(RuntimeError, match="seed_3 holds no checkpoint; run without --collect"):
        role_swap.main(["--seeds", "3", "--collect", "--runs", str(tmp_path)])
