"""research.code_tester.reevaluate: a run's readings, the gain from a re-evaluated warm start, and bad run folders."""

import json

import pytest

from research.code_tester import reevaluate


def write_rows(run, rows) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def sampled(step: int, success: float, first: float) -> dict:
    return {"step": step, "eval_sampled/success": success, "eval_sampled/coder/turn0/team_reward": first}


def test_gains_are_measured_from_the_step0_reading_and_from_the_reevaluation(tmp_path, monkeypatch):
    runs = [tmp_path / "seed1", tmp_path / "seed2"]
    training_row = {"step": 3, "rollout/success": 0.9}  # not an evaluation: never read
    write_rows(runs[0], [sampled(0, 0.25, 0.5), training_row, sampled(30, 0.4, 0.5), sampled(60, 0.5, 0.5)])
    write_rows(runs[1], [sampled(0, 0.5, 0.75), sampled(60, 0.5, 0.5)])
    again = {
        str(runs[0]): {"success": 0.375, "first program": 0.5},
        str(runs[1]): {"success": 0.5, "first program": 0.5},
    }
    monkeypatch.setattr(reevaluate, "reevaluate", lambda run, samples: again[str(run)])
    out = tmp_path / "out.json"
    reevaluate.main([*map(str, runs), "--samples", "8", "--out", str(out)])
    record = json.loads(out.read_text())
    first, second = record["runs"]
    assert first["last step"] == 60 and first["gain from step 0"] == 0.25
    assert first["gain from the re-evaluation"] == 0.125 and first["re-evaluated second turn adds"] == -0.125
    assert second["step 0 second turn adds"] == -0.25 and second["gain from the re-evaluation"] == 0.0
    gain = record["summary"]["gain from step 0"]
    assert gain["per_seed"] == [0.25, 0.0] and gain["mean"] == 0.125
    assert gain["se"] == 0.125  # stdev of (0.25, 0) is 0.1768, over sqrt(2)
    assert gain["ci95"] == pytest.approx([0.125 - 12.706 * 0.125, 0.125 + 12.706 * 0.125], abs=1e-3)


@pytest.mark.parametrize(
    "rows, message",
    [
        (None, "no metrics file"),
        ([sampled(30, 0.5, 0.5)], "no step-0 sampled evaluation"),
        ([{"step": 0, "eval/success": 0.5}], "no step-0 sampled evaluation"),
        ([sampled(0, 0.5, 0.5)], "no sampled evaluation after step 0"),
    ],
)
def test_a_run_without_its_readings_fails_naming_it_before_evaluating(tmp_path, monkeypatch, rows, message):
    run = tmp_path / "seed7"
    run.mkdir()
    if rows is not None:
        write_rows(run, rows)
    monkeypatch.setattr(reevaluate, "reevaluate", lambda run, samples: pytest.fail("evaluated a run without readings"))
    with pytest.raises(SystemExit, match=f"seed7.*{message}"):
        reevaluate.main([str(run), "--out", str(tmp_path / "out.json")])
    assert not (tmp_path / "out.json").exists()


def test_a_run_without_a_saved_warm_start_fails_naming_it(tmp_path):
    run = tmp_path / "seed3"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env": "code", "model": {"path": ""}}))
    with pytest.raises(SystemExit, match="seed3.*no model.path"):
        reevaluate.reevaluate(run, 2)


def test_combine_joins_files_into_one_summary_and_refuses_mixed_samples_or_a_run_twice(tmp_path, monkeypatch):
    runs = [tmp_path / "seed1", tmp_path / "seed2"]
    write_rows(runs[0], [sampled(0, 0.25, 0.5), sampled(60, 0.5, 0.5)])
    write_rows(runs[1], [sampled(0, 0.5, 0.75), sampled(60, 0.5, 0.5)])
    monkeypatch.setattr(reevaluate, "reevaluate", lambda run, samples: {"success": 0.5, "first program": 0.5})
    parts = [tmp_path / "a.json", tmp_path / "b.json"]
    for run, part in zip(runs, parts, strict=True):
        reevaluate.main([str(run), "--samples", "8", "--out", str(part)])
    joined = tmp_path / "joined.json"
    reevaluate.main(["--combine", *map(str, parts), "--out", str(joined)])
    together = tmp_path / "together.json"
    reevaluate.main([*map(str, runs), "--samples", "8", "--out", str(together)])
    assert json.loads(joined.read_text())["summary"] == json.loads(together.read_text())["summary"]
    assert json.loads(joined.read_text())["summary"]["gain from step 0"]["per_seed"] == [0.25, 0.0]
    with pytest.raises(SystemExit, match="listed twice"):
        reevaluate.main(["--combine", str(parts[0]), str(parts[0]), "--out", str(tmp_path / "twice.json")])
    reevaluate.main([str(runs[0]), "--samples", "2", "--out", str(tmp_path / "c.json")])
    with pytest.raises(SystemExit, match="different --samples"):
        reevaluate.main(["--combine", str(parts[1]), str(tmp_path / "c.json"), "--out", str(tmp_path / "mixed.json")])
