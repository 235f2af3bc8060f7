"""research.code_tester: the tester shares from hand-made move infos, its run callback, and the tester-rule arms."""

import dataclasses
import json
from pathlib import Path

import pytest

from research import harness, methods
from research.code_tester import code_tester
from verl_mas.env import INFRA_FAILURE, Task
from verl_mas.local.arms import ArmsPlan, arm_run_config
from verl_mas.rollout import EpisodeResult
from verl_mas.sample import Sample


def info(cases: int, degenerate: int, credited: int, caught: int, known_wrong: int, failed: int) -> dict:
    return {
        "cases": cases, "degenerate": degenerate, "credited": credited, "caught": caught, "known_wrong": known_wrong,
        "failed_by_correct": failed,
    }  # fmt: skip


def test_the_shares_of_a_rollouts_tester_moves() -> None:
    moves = [
        (True, info(2, 0, 1, 1, 3, 1)),  # catches 1 of 3; 1 of 2 cases credited; a wrong case
        (True, info(1, 1, 1, 3, 3, 0)),  # catches all 3; 1 of 2 credited
        (False, {"error": "no usable test case", "degenerate": 2}),  # unreadable: 0 and 0, no wrong case
        (True, info(1, 0, 0, 0, 0, 0)),  # no known-wrong program: left out of the catch share only
        (True, {INFRA_FAILURE: "the sandbox failed"}),  # not judged: left out
    ]
    shares = code_tester.tester_shares(moves)
    assert shares == pytest.approx(
        {"catch_share": (1 / 3 + 1 + 0) / 3, "credited_share": (0.5 + 0.5 + 0 + 0) / 4, "wrong_case_share": 1 / 4}
    )
    assert code_tester.tester_shares([]) == {}


def test_the_shares_per_turn_are_the_same_rule_on_each_turns_moves() -> None:
    moves = [
        (0, True, info(1, 0, 1, 2, 2, 0)),  # turn 0: catches both, fully credited
        (0, False, {"error": "no usable test case", "degenerate": 1}),  # turn 0: unreadable
        (1, True, info(2, 0, 0, 0, 2, 2)),  # turn 1: two wrong cases, catches nothing
    ]
    shares = code_tester.tester_shares_by_turn(moves)
    assert shares["catch_share"] == pytest.approx(1 / 3)
    assert shares["turn0/catch_share"] == pytest.approx(0.5)
    assert shares["turn1/catch_share"] == 0.0
    assert shares["turn0/wrong_case_share"] == 0.0 and shares["turn1/wrong_case_share"] == 1.0
    assert shares["turn0/credited_share"] == pytest.approx(0.5) and shares["credited_share"] == pytest.approx(1 / 3)
    assert set(shares) == {f"{prefix}{name}" for prefix in ("", "turn0/", "turn1/") for name in code_tester.SHARES}


def move(role: str, turn: int, valid: bool) -> Sample:
    return Sample("t", role, turn, 0, "shared", (1,), (2,), None, 0.0, 0.0, 0.0, False, valid=valid)


def test_the_recorder_reads_the_tester_moves_of_the_rollout_it_is_given() -> None:
    tester_infos = [
        (move("tester", 0, True), info(1, 0, 1, 2, 2, 0)),  # catches both, fully credited
        (move("tester", 1, True), info(2, 0, 0, 0, 2, 2)),  # catches nothing, two wrong cases
    ]
    coder = (move("coder", 0, True), {"caught": 99, "known_wrong": 1})  # another role's info: not read
    results = [
        EpisodeResult(Task("a", "code", 0), [tester_infos[0][0], coder[0]], [tester_infos[0][1], coder[1]]),
        EpisodeResult(Task("b", "code", 1), [tester_infos[1][0]], [tester_infos[1][1]]),
    ]
    added = code_tester.TesterRecorder().rollout(None, "eval_sampled", results)
    assert added == pytest.approx(
        {
            "eval_sampled/tester/catch_share": 0.5,
            "eval_sampled/tester/credited_share": 0.5,
            "eval_sampled/tester/wrong_case_share": 0.5,
            "eval_sampled/tester/turn0/catch_share": 1.0,
            "eval_sampled/tester/turn0/credited_share": 1.0,
            "eval_sampled/tester/turn0/wrong_case_share": 0.0,
            "eval_sampled/tester/turn1/catch_share": 0.0,
            "eval_sampled/tester/turn1/credited_share": 0.0,
            "eval_sampled/tester/turn1/wrong_case_share": 1.0,
        }
    )
    assert code_tester.TesterRecorder().rollout(None, "rollout", results[:0]) == {}


def test_the_rule_arms_share_the_team_warm_start_and_differ_in_the_tester_reward_only() -> None:
    config = methods.env_config("code", ["default"], {"env_options": {"brief_examples": True}}, 3)
    runs = {
        arm: arm_run_config(config, methods.METHODS[arm].arm, "/warm", Path("/out") / arm)
        for arm in ("at_grpo_credit_share", "at_grpo_catch_share", "at_grpo_shared")
    }
    assert runs["at_grpo_credit_share"].env_options["tester_reward"] == "credit_share"
    assert runs["at_grpo_catch_share"].env_options["tester_reward"] == "catch_share"
    assert "tester_reward" not in runs["at_grpo_shared"].env_options
    same = [dataclasses.replace(run, env_options={}, output_dir="") for run in runs.values()]
    assert same[0] == same[1] == same[2]
    assert all(run.env_options["brief_examples"] and not run.env_options["single_agent"] for run in runs.values())
    warm = ArmsPlan("code", config, {"catch": methods.METHODS["at_grpo_catch_share"].arm}, (0,), Path("/out"), "catch")
    assert "tester_reward" not in warm.warm_start_config(0).env_options  # the arm's reward is not its warm start's
    centred_arm = methods.METHODS["at_grpo_catch_share_centred"].arm
    centred = arm_run_config(config, centred_arm, "/warm", Path("/out/centred"))
    catch = runs["at_grpo_catch_share"]
    assert not centred.norm_adv_by_std and catch.norm_adv_by_std  # the one key the centred arm changes
    restored = dataclasses.replace(centred, norm_adv_by_std=True, output_dir="")
    assert restored == dataclasses.replace(catch, output_dir="")


def write_run(out: Path, arm: str, seed: int, rows: list[dict]) -> None:
    folder = out / "code" / f"seed{seed}" / arm
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_each_arms_gain_is_paired_with_its_own_warm_start_per_seed(tmp_path) -> None:
    def evaluation(step: int, greedy: float, sampled: float | None = None) -> dict:
        row = {"step": step, "eval/success": greedy}
        return row | ({"eval_sampled/success": sampled} if sampled is not None else {})

    train = {"step": 1, "rollout/success": 0.9}  # a training row: no evaluation, so it is not read as one
    write_run(tmp_path, "at_grpo_catch_share", 0, [evaluation(0, 0.5, 0.4), train, evaluation(2, 0.75, 0.5)])
    write_run(tmp_path, "at_grpo_catch_share", 1, [evaluation(0, 1.0, 0.9), train, evaluation(2, 0.5, 0.8)])
    write_run(tmp_path, "at_grpo_catch_share", 2, [evaluation(0, 0.2, 0.2), train])  # unfinished: left out
    write_run(tmp_path, "single_grpo", 0, [evaluation(0, 0.1), evaluation(2, 0.3)])  # no sampled evaluations
    arms = ["at_grpo_catch_share", "single_grpo"]
    rows = {(r["arm"], r["metric"]): r for r in code_tester.gain_rows(code_tester.Runs.read(tmp_path, arms, [0, 1, 2]))}

    greedy = rows["at_grpo_catch_share", "eval/success"]
    assert greedy["seeds"] == [0, 1] and greedy["per_seed"] == pytest.approx([0.25, -0.5])
    assert greedy["mean"] == pytest.approx(-0.125)
    assert greedy["se"] == pytest.approx(0.375)  # stdev of (0.25, -0.5) / sqrt 2
    half = 12.706 * 0.375  # Student's t with 1 degree of freedom
    assert greedy["ci95"] == pytest.approx([-0.125 - half, -0.125 + half], abs=1e-3)
    sampled = rows["at_grpo_catch_share", "eval_sampled/success"]
    assert sampled["per_seed"] == pytest.approx([0.1, -0.1])
    assert rows["single_grpo", "eval/success"]["per_seed"] == pytest.approx([0.2])
    assert rows["single_grpo", "eval/success"]["se"] is None  # one seed: no spread to read
    assert rows["single_grpo", "eval_sampled/success"]["seeds"] == []
    assert rows["single_grpo", "eval/coder/turn1/invalid_move_share"]["seeds"] == []  # not recorded: no seed

    text = "\n".join(code_tester.report_lines(list(rows.values()), [], [], 5))
    assert "| at_grpo_catch_share | eval/success | 2 | -0.125 (0.375) [" in text
    assert "| single_grpo | eval_sampled/success |" not in text  # no seed to show


def test_the_coders_readings_are_gains_too(tmp_path) -> None:
    before = {"step": 0, "eval/success": 0.5, "eval/coder/turn0/local_reward": 0.9}
    before["eval/coder/turn1/invalid_move_share"] = 0.25
    before["eval_sampled/coder/turn1/invalid_move_share"] = 0.5
    after = {"step": 15, "eval/success": 0.75, "eval/coder/turn0/local_reward": 0.9}
    after["eval/coder/turn1/invalid_move_share"] = 1.0  # success rose with the first program unchanged
    after["eval_sampled/coder/turn1/invalid_move_share"] = 0.375
    write_run(tmp_path, "at_grpo_catch_share", 0, [before, after])
    rows = {
        r["metric"]: r for r in code_tester.gain_rows(code_tester.Runs.read(tmp_path, ["at_grpo_catch_share"], [0]))
    }
    assert rows["eval/coder/turn0/local_reward"]["per_seed"] == pytest.approx([0.0])
    assert rows["eval/coder/turn1/invalid_move_share"]["per_seed"] == pytest.approx([0.75])
    assert rows["eval_sampled/coder/turn1/invalid_move_share"]["per_seed"] == pytest.approx([-0.125])
    assert rows["eval/success"]["per_seed"] == pytest.approx([0.25])


def test_success_splits_into_the_first_programs_solves_and_what_the_second_turn_adds(tmp_path) -> None:
    # before RL the first program solves 0.75 but revisions break a third of those: success 0.5; after RL the
    # first program solves 0.625 and the second turn neither fixes nor breaks: success 0.625
    before = {"step": 0, "eval/success": 0.5, "eval/coder/turn0/team_reward": 0.75, "eval_sampled/success": 0.5}
    after = {"step": 60, "eval/success": 0.625, "eval/coder/turn0/team_reward": 0.625, "eval_sampled/success": 0.5}
    after["eval_sampled/coder/turn0/team_reward"] = 0.25  # not read before RL: no sampled split for this seed
    train = {"step": 1, "rollout/success": 1.0}  # no evaluation: nothing added
    write_run(tmp_path, "at_grpo_catch_share", 0, [before, train, after])
    runs = code_tester.Runs.read(tmp_path, ["at_grpo_catch_share"], [0])
    assert runs.rows["at_grpo_catch_share", 0][1] == train
    rows = {r["metric"]: r for r in code_tester.gain_rows(runs)}
    assert rows["eval/second_turn_adds"]["per_seed"] == pytest.approx([0.25])  # -0.25 -> 0
    assert rows["eval/coder/turn0/team_reward"]["per_seed"] == pytest.approx([-0.125])
    assert rows["eval/success"]["per_seed"] == pytest.approx([0.125])  # the sum of the two
    assert runs.rows["at_grpo_catch_share", 0][2]["eval_sampled/second_turn_adds"] == pytest.approx(0.25)
    assert rows["eval_sampled/second_turn_adds"]["seeds"] == []  # one end only: no gain


def test_the_gain_difference_leaves_out_the_warm_starts_gap(tmp_path) -> None:
    def run(before: float, after: float) -> list[dict]:
        return [{"step": 0, "eval/success": before}, {"step": 15, "eval/success": after}]

    write_run(tmp_path, "at_grpo_catch_share", 0, run(0.5, 0.75))  # gains +0.25 and +0.5
    write_run(tmp_path, "at_grpo_catch_share", 1, run(0.25, 0.75))
    write_run(tmp_path, "single_grpo", 0, run(0.25, 0.25))  # another warm start, lower: gains 0 and -0.25
    write_run(tmp_path, "single_grpo", 1, run(0.5, 0.25))
    rows = {
        r["metric"]: r
        for r in code_tester.paired_rows(
            code_tester.Runs.read(tmp_path, ["at_grpo_catch_share", "single_grpo"], [0, 1])
        )
    }
    assert rows["eval/success"]["per_seed"] == pytest.approx([-0.5, -0.5])  # after minus after
    gain = rows["gain of eval/success"]
    assert gain["pair"] == "single_grpo - at_grpo_catch_share"
    assert gain["per_seed"] == pytest.approx([-0.25, -0.75]) and gain["mean"] == pytest.approx(-0.5)
    assert rows["gain of eval_sampled/success"]["seeds"] == []  # no sampled evaluation recorded


def test_until_reads_every_run_as_of_one_step(tmp_path) -> None:
    evals = [{"step": 0, "eval/success": 0.5}, {"step": 20, "eval/success": 0.75}, {"step": 40, "eval/success": 0.25}]
    write_run(tmp_path, "at_grpo_catch_share", 0, evals)
    write_run(tmp_path, "at_grpo_catch_share_centred", 0, evals[:2])  # stopped after step 20's evaluation
    arms = ["at_grpo_catch_share", "at_grpo_catch_share_centred"]
    gains = {
        r["arm"]: r
        for r in code_tester.gain_rows(code_tester.Runs.read(tmp_path, arms, [0], until=20))
        if r["metric"] == "eval/success"
    }
    assert gains["at_grpo_catch_share"]["per_seed"] == pytest.approx([0.25])  # step 20's, not step 40's -0.25
    assert [row["step"] for row in code_tester.history(tmp_path, arms[0], 0, until=20)] == [0, 20]
    paired = code_tester.paired_rows(code_tester.Runs.read(tmp_path, arms, [0], until=20))
    assert paired[0]["per_seed"] == pytest.approx([0.0])  # 0.75 against 0.75 at the same step
    # each run's last evaluation: steps 40 and 20
    unmatched = code_tester.paired_rows(code_tester.Runs.read(tmp_path, arms, [0]))
    assert unmatched[0]["per_seed"] == pytest.approx([0.5])
    # as of step 40, the run stopped after step 20 has no evaluation there: it is left out, not read at step 20
    assert code_tester.history(tmp_path, arms[1], 0, until=40) == []
    assert code_tester.paired_rows(code_tester.Runs.read(tmp_path, arms, [0], until=40))[0]["seeds"] == []
    assert code_tester.history(tmp_path, arms[0], 0, until=30) == []  # no evaluation at step 30 either
    text = "\n".join(code_tester.report_lines([], paired, [], 5, until=20))
    assert "as of step 20" in text and "Paired differences at the evaluation at step 20" in text
    assert code_tester.parse_args(["--until", "20"]).collect  # a report of saved runs: nothing trains
    with pytest.raises(SystemExit):
        code_tester.parse_args(["--until", "-1"])


def test_the_per_role_arm_runs_only_on_request() -> None:
    assert code_tester.parse_args([]).arms == list(code_tester.ARMS)
    assert code_tester.parse_args(["--arms", "at_grpo_per_role"]).arms == ["at_grpo_per_role"]
    with pytest.raises(SystemExit):
        code_tester.parse_args(["--arms", "at_grpo_shared"])  # not one of this experiment's arms


def test_share_rows_table_the_first_turn_only_for_runs_that_recorded_it(tmp_path) -> None:
    def run(turn0: bool) -> list[dict]:
        shares = {"catch_share": 0.5} | ({"turn0/catch_share": 0.75} if turn0 else {})
        before = {"step": 0, "eval/success": 0.5} | {f"eval_sampled/tester/{k}": v for k, v in shares.items()}
        after = {"step": 1, "eval/success": 0.5} | {f"eval_sampled/tester/{k}": v - 0.25 for k, v in shares.items()}
        return [
            before,
            {"step": 1, "rollout/success": 1.0} | {f"rollout/tester/{k}": v for k, v in shares.items()},
            after,
        ]

    write_run(tmp_path, "at_grpo_catch_share", 0, run(turn0=False))  # recorded before per-turn shares existed
    write_run(tmp_path, "at_grpo_catch_share", 1, run(turn0=True))
    rows = {
        r["share"]: r
        for r in code_tester.share_rows(code_tester.Runs.read(tmp_path, ["at_grpo_catch_share"], [0, 1]), 5)
    }
    assert rows["catch_share"]["seeds"] == 2 and rows["turn0/catch_share"]["seeds"] == 1
    assert rows["turn0/catch_share"]["eval_before"] == 0.75 and rows["turn0/catch_share"]["eval_after"] == 0.5
    assert rows["catch_share"]["eval_change"]["mean"] == pytest.approx(-0.25)
    assert "turn0/wrong_case_share" not in rows  # recorded by no run: no row


def test_the_plan_runs_every_arm_on_every_seed_paired_with_the_first_arm(tmp_path) -> None:
    argv = ["--seeds", "3", "5", "--arms", "single_grpo", "at_grpo_catch_share", "--steps", "7"]
    args = code_tester.parse_args([*argv, "--out", str(tmp_path / "out"), "--collect", "update.lr=1e-4"])
    plan = harness.arms_plan(code_tester.ENV, args, ["python", "-m", "research.code_tester"], ["k=1", *args.overrides])
    assert plan == harness.Plan(
        envs=["code"],
        seeds=[3, 5],
        methods=["single_grpo", "at_grpo_catch_share"],
        out=tmp_path / "out",
        command=["python", "-m", "research.code_tester"],
        steps=7,
        overrides=["k=1", "update.lr=1e-4"],
        baseline="single_grpo",  # the first arm named, not the study's first by default
        collect=True,
    )
