"""research.code_tester.before_rl: a design's step-0 held-out readings per seed, with mean and standard error."""

import json

import pytest

from research.code_tester import before_rl


def write_run(runs, seed: int, success: float, first: float, wrong_case: float) -> None:
    folder = runs / "code" / f"seed{seed}" / "at_grpo_catch_share"
    folder.mkdir(parents=True)
    sampled = {
        "eval_sampled/success": success,
        "eval_sampled/coder/turn0/team_reward": first,
        "eval_sampled/tester/turn0/catch_share": 0.5,
        "eval_sampled/tester/turn0/credited_share": 0.25,
        "eval_sampled/tester/turn0/wrong_case_share": wrong_case,
    }
    rows = [
        {"step": 0, "eval/success": 0.9},  # a greedy-only row first: the sampled one is the reading
        {"step": 0, "eval/success": 0.75, **sampled},
        {"step": 30, "eval/success": 0.0, **{key: 0.0 for key in sampled}},  # after RL: never read
    ]
    (folder / "metrics.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")


def test_readings_are_the_step0_rows_and_the_second_turn_is_success_minus_the_first_program(tmp_path):
    write_run(tmp_path, 3, success=0.5, first=0.75, wrong_case=0.25)
    write_run(tmp_path, 8, success=0.75, first=0.5, wrong_case=0.75)
    out = tmp_path / "out" / "before_rl.json"
    before_rl.main(["--runs", str(tmp_path), "--seeds", "3", "8", "--out", str(out)])
    readings = json.loads(out.read_text())["readings"]
    adds = readings["sampled second turn adds"]
    assert adds["per_seed"] == [-0.25, 0.25] and adds["mean"] == 0.0
    assert adds["se"] == pytest.approx(0.25)  # stdev of (-0.25, 0.25) is 0.3536; over sqrt(2)
    assert readings["greedy success"]["per_seed"] == [0.75, 0.75] and readings["greedy success"]["se"] == 0.0
    assert readings["tester first turn replies with a failing case"]["mean"] == 0.5


def test_a_run_without_a_step0_evaluation_or_one_seed_fails_at_start(tmp_path):
    write_run(tmp_path, 1, success=0.5, first=0.5, wrong_case=0.5)
    folder = tmp_path / "code" / "seed2" / "at_grpo_catch_share"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval/success": 0.5}) + "\n")
    with pytest.raises(SystemExit, match="seed2.*no step-0 evaluation row"):
        before_rl.main(["--runs", str(tmp_path), "--seeds", "1", "2", "--out", str(tmp_path / "x.json")])
    with pytest.raises(SystemExit):
        before_rl.main(["--runs", str(tmp_path), "--seeds", "1", "--out", str(tmp_path / "x.json")])


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no metrics file"),
        ('{"step": 0, "eval/success": 0.5}\n{"step": 0, tru', "line 2: not a JSON row"),
        ('{"step": 0, "eval/success": 0.5, "eval_sampled/success": 0.5}\n', "lacks .*coder/turn0/team_reward"),
        ("", "no step-0 evaluation row"),
    ],
)
def test_a_missing_truncated_or_incomplete_metrics_file_fails_naming_it(tmp_path, content, message):
    write_run(tmp_path, 1, success=0.5, first=0.5, wrong_case=0.5)
    folder = tmp_path / "code" / "seed2" / "at_grpo_catch_share"
    folder.mkdir(parents=True)
    if content is not None:
        (folder / "metrics.jsonl").write_text(content)
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit, match=f"seed2.*{message}"):
        before_rl.main(["--runs", str(tmp_path), "--seeds", "1", "2", "--out", str(out)])
    assert not out.exists()


def test_admission_prints_only_the_seeds_whose_second_turn_costs_at_least_the_set_amount(tmp_path, capsys):
    write_run(tmp_path, 1, success=0.5, first=0.75, wrong_case=0.9)  # costs 0.25: admitted
    write_run(tmp_path, 2, success=0.65, first=0.75, wrong_case=0.9)  # costs 0.10 exactly: admitted (at least)
    write_run(tmp_path, 3, success=0.7, first=0.75, wrong_case=0.9)  # costs 0.05: left out
    write_run(tmp_path, 4, success=0.75, first=0.5, wrong_case=0.1)  # the second turn adds: left out
    before_rl.main(["--runs", str(tmp_path), "--seeds", "4", "3", "2", "1", "--admit-cost", "0.099999"])
    assert capsys.readouterr().out.split() == ["2", "1"]
    before_rl.main(["--runs", str(tmp_path), "--seeds", "3", "--admit-cost", "0.1"])  # one seed is enough here
    assert capsys.readouterr().out.strip() == ""
    with pytest.raises(SystemExit):
        before_rl.main(["--runs", str(tmp_path), "--seeds", "1", "--admit-cost", "1.5"])
    with pytest.raises(SystemExit):  # a reading file and an admission at once
        before_rl.main(["--runs", str(tmp_path), "--seeds", "1", "--admit-cost", "0.1", "--out", str(tmp_path / "x")])
