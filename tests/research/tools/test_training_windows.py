"""research.tools.training_windows: window means per run, then mean and standard error over a label's runs."""

import json
import math

import pytest

from research.tools import training_windows


def write_run(folder, successes: list[float]) -> None:
    folder.mkdir(parents=True)
    rows = [{"step": 0, "eval/success": 0.1}]  # an evaluation row: no training step, not in any window
    rows += [{"step": i + 1, "time/step_s": 1.0, "rollout/success": s} for i, s in enumerate(successes)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_windows_average_each_run_then_the_runs(tmp_path):
    write_run(tmp_path / "seed0" / "arm", [0.0, 1.0, 1.0, 1.0])  # windows of 2: 0.5, 1.0
    write_run(tmp_path / "seed1" / "arm", [0.0, 0.0, 0.5, 0.5])  # 0.0, 0.5
    write_run(tmp_path / "seed0" / "other", [1.0, 1.0])
    report = training_windows.main(
        ["--runs", f"a={tmp_path}/seed*/arm", "--window", "2", "--out", str(tmp_path / "w.json")]
    )
    assert report["a"]["runs"] == [str(tmp_path / "seed0" / "arm"), str(tmp_path / "seed1" / "arm")]
    first, second = report["a"]["windows"]
    assert (first["steps"], second["steps"]) == ("1-2", "3-4")
    assert first["rollout/success"]["mean"] == pytest.approx(0.25)
    assert first["rollout/success"]["se"] == pytest.approx(math.sqrt(0.125) / math.sqrt(2))  # sd of 0.5 and 0.0
    assert second["rollout/success"]["mean"] == pytest.approx(0.75)
    assert math.isnan(first["rollout/reward"]["mean"]) and first["rollout/reward"]["runs"] == 0  # never logged
    assert json.loads((tmp_path / "w.json").read_text())["a"]["windows"][1]["rollout/success"]["runs"] == 2
    change = report["a"]["change"]["rollout/success"]  # per run: 1.0 - 0.5 and 0.5 - 0.0
    assert (change["mean"], change["n"]) == (pytest.approx(0.5), 2) and change["se"] == pytest.approx(0.0)
    assert change["ci95"] == pytest.approx([0.5, 0.5])


def test_chosen_keys_and_a_change_with_spread(tmp_path):
    for seed, values in enumerate(([1.0, 2.0], [1.0, 4.0], [0.0, 0.0])):
        folder = tmp_path / f"seed{seed}" / "arm"
        folder.mkdir(parents=True)
        rows = [
            {"step": i + 1, "time/step_s": 1.0, "rollout/tester/turn0/local_reward": v} for i, v in enumerate(values)
        ]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    key = "rollout/tester/turn0/local_reward"
    report = training_windows.main(["--runs", f"a={tmp_path}/seed*/arm", "--window", "1", "--keys", key])
    assert set(report["a"]["windows"][0]) == {"steps", key}
    change = report["a"]["change"][key]  # per run: +1, +3, 0
    assert change["mean"] == pytest.approx(4 / 3)
    se = math.sqrt(((1 - 4 / 3) ** 2 + (3 - 4 / 3) ** 2 + (4 / 3) ** 2) / 2) / math.sqrt(3)
    assert change["se"] == pytest.approx(se)
    assert change["ci95"] == pytest.approx([4 / 3 - 4.303 * se, 4 / 3 + 4.303 * se], abs=1e-3)  # t, 2 d.f.


def test_a_label_that_matches_no_run_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        training_windows.main(["--runs", f"a={tmp_path}/nothing*"])


def test_a_change_needs_two_windows_and_the_key_at_both_ends(tmp_path):
    write_run(tmp_path / "seed0" / "arm", [0.0, 1.0])
    write_run(tmp_path / "seed1" / "arm", [])  # only its evaluation row so far: left out
    table, change = training_windows.label_windows(
        sorted(tmp_path.glob("seed*/arm")), 1, ["rollout/success", "rollout/reward"]
    )
    assert [row["rollout/success"]["runs"] for row in table] == [1, 1]
    assert change["rollout/success"]["mean"] == pytest.approx(1.0) and change["rollout/success"]["n"] == 1
    assert change["rollout/reward"]["mean"] is None and change["rollout/reward"]["n"] == 0  # never logged
    table, change = training_windows.label_windows(sorted(tmp_path.glob("seed*/arm")), 2, ["rollout/success"])
    assert len(table) == 1 and change["rollout/success"]["n"] == 0  # one window: no change to read
