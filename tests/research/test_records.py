"""research/records.py: the harness writes one compact record a run, the reader gives back what the run's metrics
hold, and a malformed record fails naming its file and line."""

import json

import pytest

from research import harness
from research.learning.figures import gain_summary
from research.records import RUNS_FILE, RunCurves, read_runs, run_line, select, write_runs
from verl_mas.local.reporting import read_metrics


def test_a_tiny_harness_run_writes_records_whose_readings_are_the_runs_metrics(tmp_path):
    out = tmp_path / "tiny"
    plan = harness.Plan(
        envs=["plan_path"],
        seeds=[0, 1],
        methods=["mas_no_rl", "at_grpo_shared"],
        out=out,
        command=["tiny"],
        steps=2,
        presets=["smoke"],
        overrides=["eval_samples=1", "progress=false"],
    )
    harness.run_plan(plan)

    runs = read_runs(out / RUNS_FILE)
    assert sorted((r.method, r.seed) for r in runs) == [(m, s) for m in ("at_grpo_shared", "mas_no_rl") for s in (0, 1)]
    gains = []
    for run in select(runs, "at_grpo_shared"):
        rows = read_metrics(out / "plan_path" / f"seed{run.seed}" / "at_grpo_shared")
        greedy = [(row["step"], row["eval/success"]) for row in rows if "eval/success" in row]
        sampled = [(row["step"], row["eval_sampled/success"]) for row in rows if "eval_sampled/success" in row]
        assert [step for step, _ in greedy] == [0, 1, 2]  # the smoke preset evaluates every step
        assert run.greedy == tuple(greedy) and run.sampled == tuple(sampled)
        assert run.labels["command"] == "tiny" and "k=2" in run.labels["keys"]
        gains.append(greedy[-1][1] - greedy[0][1])
    # the paired gain a page prints is each run's last reading minus its first, averaged by hand here
    assert gain_summary(select(runs, "at_grpo_shared"), "greedy")["mean"] == pytest.approx(sum(gains) / 2)
    for run in select(runs, "mas_no_rl"):
        assert [step for step, _ in run.greedy] == [0]


def test_records_round_trip_and_select_by_seed_env_and_label(tmp_path):
    path = tmp_path / RUNS_FILE
    runs = [
        RunCurves("sokoban", "at_grpo_shared", 1, ((0, 0.5), (40, 0.25)), ((0, 0.5),), {"design": "kl"}),
        RunCurves("sokoban", "at_grpo_shared", 0, ((0, 0.75),), (), {"design": "pace"}),
        RunCurves("sudoku", "at_grpo_shared", 0, ((0, 1.0),), (), {"design": "kl"}),
    ]
    write_runs(path, runs)
    assert read_runs(path) == runs
    assert select(runs, "at_grpo_shared", design="kl", env="sokoban") == [runs[0]]
    assert [r.seed for r in select(runs, "at_grpo_shared", env="sokoban")] == [0, 1]
    assert select(runs, "at_grpo_shared", seed=0, env="sudoku") == [runs[2]]
    assert runs[0].at("greedy", 40) == 0.25 and runs[0].last("sampled") == (0, 0.5)
    with pytest.raises(KeyError, match="sokoban at_grpo_shared seed 1 .*design=kl.* no greedy reading at step 20"):
        runs[0].at("greedy", 20)
    with pytest.raises(KeyError, match="no sampled reading"):
        runs[1].last("sampled")


GOOD = {"env": "plan_path", "method": "single_grpo", "seed": 2, "greedy": [[0, 0.5], [10, 0.75]]}


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "Expecting property name"),
        ("[1, 2]", "a run is a JSON object, not list"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "method"}), "missing key 'method'"),
        (json.dumps(GOOD | {"seed": "2"}), "'seed' is str, not int"),
        (json.dumps(GOOD | {"seed": True}), "'seed' is bool, not int"),
        (json.dumps(GOOD | {"greedy": [[0, 0.5], [0, 0.75]]}), r"'greedy'\[1\]: step 0 does not follow step 0"),
        (json.dumps(GOOD | {"sampled": [[0, 1.5]]}), r"'sampled'\[0\] is \[0, 1.5\], not \[step, success in 0..1\]"),
        (json.dumps(GOOD | {"sampled": [[0.0, 0.5]]}), r"'sampled'\[0\] is \[0.0, 0.5\]"),
        (json.dumps(GOOD | {"sampled": {"0": 0.5}}), "'sampled' is dict, not a list"),
    ],
)
def test_a_malformed_line_fails_naming_the_file_and_the_line(tmp_path, line, problem):
    path = tmp_path / "study" / RUNS_FILE
    path.parent.mkdir()
    path.write_text(json.dumps(GOOD) + "\n\n" + line + "\n")
    with pytest.raises(ValueError, match=f"study/{RUNS_FILE}, line 3: {problem}"):
        read_runs(path)


def test_a_line_is_the_core_keys_then_the_labels():
    run = RunCurves("code", "single_grpo", 3, ((0, 0.25),), ((0, 0.125),), {"campaign": "room"})
    assert json.loads(run_line(run)) == {
        "env": "code", "method": "single_grpo", "seed": 3, "greedy": [[0, 0.25]], "sampled": [[0, 0.125]],
        "campaign": "room",
    }
