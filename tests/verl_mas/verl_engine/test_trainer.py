"""The AT-GRPO advantage step: hand-computed advantages per (task, role, turn), restored rewards, policy split."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from verl_mas.group_health import GroupHealthWarnings
from verl_mas.verl_engine.batch import (
    SampleTags,
    at_grpo_advantages,
    prompt_codes_of,
    reward_scores,
    sample_metrics,
    split_by_policy,
    step_group_health,
)
from verl_mas.verl_engine.config import MasConfig
from verl_mas.verl_engine.hooks import update_record
from verl_mas.verl_engine.hooks.update_record import (
    UpdateRecorder,
    fetch_update_batch,
    save_update_batch,
    update_audit_record,
)
from verl_mas.verl_engine.trainer import AtGrpoTrainer

R3 = 1 / math.sqrt(3)
# (task, role, turn) -> the K=3 mixed rewards and their advantages, worked out by hand:
# mean of the three, unbiased std, (r - mean) / std.
GROUPS = {
    ("T1", "a", 0): ([0, 1, 2], [-1, 0, 1]),  # mean 1, std 1
    ("T1", "a", 1): ([2, 2, 2], [0, 0, 0]),  # no spread
    ("T1", "b", 0): ([1, 1, 4], [-R3, -R3, 2 * R3]),  # mean 2, var (1 + 1 + 4) / 2 = 3
    ("T1", "b", 1): ([3, 0, 0], [2 * R3, -R3, -R3]),  # mean 1, var 3
    ("T2", "a", 0): ([0, 2, 4], [-1, 0, 1]),  # mean 2, std 2
    ("T2", "a", 1): ([5, 1, 3], [1, -1, 0]),  # mean 3, std 2
    ("T2", "b", 0): ([-1, 0, 1], [-1, 0, 1]),
    ("T2", "b", 1): ([0, 0, 3], [-R3, -R3, 2 * R3]),
}
ALGORITHM = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "use_kl_in_reward": False})


def hand_batch():
    """24 rows in a scrambled order, responses of 1..4 tokens, plus one padding row copying row 0's tags."""
    rows = []
    for (task, role, turn), (rewards, advantages) in GROUPS.items():
        for branch, (reward, advantage) in enumerate(zip(rewards, advantages, strict=True)):
            fields = {"task_uid": task, "role": role, "turn": turn, "branch": branch, "mixed_reward": float(reward)}
            fields.update(policy=role, env_error=task == "T2" and role == "b", valid=reward != -1)
            rows.append((fields, advantage))
    order = np.random.default_rng(0).permutation(len(rows))
    rows = [rows[i] for i in order]
    extra = [fields for fields, _ in rows] + [dict(rows[0][0], mixed_reward=100.0)]
    expected = [advantage for _, advantage in rows] + [0.0]
    lengths = torch.tensor([1 + i % 4 for i in range(len(extra))])
    padding = [False] * len(rows) + [True]
    return extra, padding, lengths, torch.tensor(expected, dtype=torch.float32)


def prompt_of(fields: dict) -> list[int]:
    """The prompt a row answered: one per (task, role, turn), role b's a token shorter (so rows pad differently)."""
    task, role, turn = fields["task_uid"], fields["role"], fields["turn"]
    return [int(task[1:]), turn, 7][: 3 if role == "a" else 2]


def mask_of(lengths: torch.Tensor, width: int) -> torch.Tensor:
    return (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()


def test_advantages_group_by_task_role_and_turn():
    extra, padding, lengths, expected = hand_batch()
    tags = SampleTags.from_rows(extra, padding)
    width = int(lengths.max())
    mask = mask_of(lengths, width)
    mask[3] = 0  # a masked-out response (empty reply): still counts in its group, trains no token
    scores = reward_scores(tags, lengths, width)
    assert scores.sum(dim=1).tolist() == pytest.approx([f["mixed_reward"] for f in extra[:-1]] + [0.0])
    assert scores[torch.arange(len(extra)), lengths - 1].tolist() == scores.sum(dim=1).tolist()  # on the last token
    advantages = at_grpo_advantages(scores, mask, tags, "task_role_turn", ALGORITHM)
    expected_tokens = expected.unsqueeze(1) * mask
    torch.testing.assert_close(advantages, expected_tokens, rtol=1e-5, atol=1e-5)
    assert advantages[-1].abs().sum() == 0  # the padding row is in no group


def test_task_grouping_puts_a_task_in_one_group():
    extra = [
        {"task_uid": "T", "role": "a", "turn": 0, "policy": "p", "mixed_reward": 0.0},
        {"task_uid": "T", "role": "b", "turn": 0, "policy": "p", "mixed_reward": 2.0},
        {"task_uid": "T", "role": "a", "turn": 1, "policy": "p", "mixed_reward": 4.0},
        {"task_uid": "U", "role": "a", "turn": 0, "policy": "p", "mixed_reward": 7.0},
    ]
    tags = SampleTags.from_rows(extra, [False] * 4)
    lengths = torch.tensor([2, 2, 2, 2])
    scores = reward_scores(tags, lengths, 2)
    by_task = at_grpo_advantages(scores, torch.ones(4, 2), tags, "task", ALGORITHM)
    # T: mean 2, std 2; U alone: a group of one keeps its score (mean 0, std 1), as in verl's GRPO
    assert by_task[:, 0].tolist() == pytest.approx([-1, 0, 1, 7], abs=1e-5)
    by_turn = at_grpo_advantages(scores, torch.ones(4, 2), tags, "task_role_turn", ALGORITHM)
    assert by_turn[:, 0].tolist() == pytest.approx([0, 2, 4, 7], abs=1e-5)  # every group has one sample


def test_rows_from_another_agent_loop_are_rejected():
    with pytest.raises(ValueError, match=r"row 1 has no extra_fields \['mixed_reward'\]"):
        SampleTags.from_rows(
            [
                {"task_uid": "T", "role": "a", "turn": 0, "policy": "p", "mixed_reward": 1.0},
                {"task_uid": "T", "role": "a", "turn": 0, "policy": "p"},
            ],
            [False, False],
        )


@pytest.mark.parametrize("judge_failed", [False, True], ids=["all_judged", "one_not_judged"])
def test_metrics_per_role(judge_failed):
    extra, padding, _, _ = hand_batch()
    if judge_failed:  # a fourth, unjudged candidate in the zero-variance group (T1, a, 1) and its score of -50
        failed = {"task_uid": "T1", "role": "a", "turn": 1, "branch": 3, "mixed_reward": -50.0, "policy": "a"}
        failed.update(env_error=False, valid=False, infra_failure=True)
        extra, padding = [*extra, failed], [*padding, False]
    metrics = sample_metrics(SampleTags.from_rows(extra, padding), "task_role_turn")
    assert metrics["mas/a/zero_variance_group_share"] == 0.25  # (T1, a, 1) of role a's four groups
    assert metrics["mas/b/zero_variance_group_share"] == 0.0
    assert metrics["mas/a/reward/mean"] == pytest.approx((3 + 6 + 6 + 9) / 12)  # padding row's 100 left out
    assert metrics["mas/b/reward/mean"] == pytest.approx((6 + 3 + 0 + 3) / 12)
    assert metrics["mas/b/invalid_share"] == pytest.approx(1 / 12)
    assert metrics["mas/env_failed_tasks"] == 1.0


def test_rows_split_by_policy_and_merge_back():
    batch = KVBatchMeta(keys=["k0", "k1", "k2", "k3"], tags=[{"i": i} for i in range(4)], partition_id="train")
    parts = split_by_policy(batch, ["b", "a", "b", "a"], ["a", "b", "c"])
    assert list(parts) == ["a", "b"]  # a policy without rows this step is left out
    assert parts["a"].keys == ["k1", "k3"] and parts["b"].keys == ["k0", "k2"]
    assert [t["i"] for t in parts["b"].tags] == [0, 2]
    merged = KVBatchMeta.concat(list(parts.values()))
    assert sorted(merged.keys) == batch.keys
    with pytest.raises(ValueError, match=r"policies \['z'\]"):
        split_by_policy(batch, ["a", "z", "a", "a"], ["a", "b"])


def put_rows(store, rows: dict[str, dict], partition: str) -> KVBatchMeta:
    return store.kv_batch_put(
        keys=list(rows), partition_id=partition, fields=list_of_dict_to_tensordict(list(rows.values()))
    )


@pytest.mark.parametrize("judge_failed", [False, True], ids=["all_judged", "one_not_judged"])
def test_trainer_advantage_step_writes_restored_rewards_and_advantages(transfer_queue, judge_failed):
    extra, padding, lengths, expected = hand_batch()
    if judge_failed:  # a fourth candidate in (T1, b, 0), which the judge could not run: the group stays the three
        failed = next(i for i, f in enumerate(extra) if (f["task_uid"], f["role"], f["turn"]) == ("T1", "b", 0))
        extra.insert(0, dict(extra[failed], branch=3, mixed_reward=-7.0, infra_failure=True))
        padding, lengths = [False, *padding], torch.cat([torch.tensor([3]), lengths])
        expected = torch.cat([torch.zeros(1), expected])
    last_reward = extra[-2]["mixed_reward"]
    rows = {
        f"uid{i}_0_{i}": {
            "response_mask": torch.ones(int(n), dtype=torch.int64),
            "rm_scores": torch.nn.functional.one_hot(torch.tensor(int(n) - 1), int(n)).float() * last_reward,
            "prompts": torch.tensor(prompt_of(fields)),
            "extra_fields": fields,
        }
        for i, (fields, n) in enumerate(zip(extra, lengths, strict=True))
    }
    stored_meta = put_rows(transfer_queue, rows, "advantage_step")
    trainer = AtGrpoTrainer.__new__(AtGrpoTrainer)  # the advantage step only: no workers, no servers
    trainer.config = OmegaConf.create({"algorithm": {**ALGORITHM, "rollout_correction": {"bypass_mode": False}}})
    trainer.mas = MasConfig.from_mapping({"env": "counter", "router": "per_role", "max_logprob_gap": None})
    trainer.group_health_warnings = GroupHealthWarnings()
    trainer.global_steps = 1
    batch = KVBatchMeta(
        keys=stored_meta.keys,
        tags=[{"is_padding": pad} for pad in padding],
        partition_id=stored_meta.partition_id,
        fields=stored_meta.fields,
    )
    metrics = {}
    returned = trainer._compute_advantage(batch, metrics)
    fields = ["rm_scores", "advantages", "returns"] + (["response_mask"] if judge_failed else [])
    stored = transfer_queue.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
    if judge_failed:  # out of the loss and its token count, as a padding row; every other row keeps its mask
        masks = [m.tolist() for m in stored["response_mask"].unbind()]
        assert masks[0] == [0, 0, 0]
        assert masks[1:] == [[1] * int(n) for n in lengths[1:]]
        assert metrics["mas/infra_failures"] == 1.0
    assert [float(r.sum()) for r in stored["rm_scores"].unbind()] == pytest.approx(
        [f["mixed_reward"] for f in extra[:-1]] + [0.0]
    )
    advantages = stored["advantages"].unbind()
    torch.testing.assert_close(torch.stack([a[0] for a in advantages]), expected, rtol=1e-5, atol=1e-5)
    assert all(torch.equal(a, r) for a, r in zip(advantages, stored["returns"].unbind(), strict=True))
    assert all(bool((a == a[0]).all()) for a in advantages)  # one value per response
    assert metrics["mas/a/zero_variance_group_share"] == 0.25
    # the health of the eight (task, role, turn) groups of three: (T1, a, 1) has no spread; one prompt each
    assert metrics["group_health/groups"] == 8.0 and metrics["group_health/samples"] == 24.0
    assert metrics["group_health/singleton_share"] == 0.0 and metrics["group_health/zero_variance_share"] == 0.125
    assert metrics["group_health/mixed_prompt_share"] == 0.0
    assert metrics["group_health/prompt_offset_share"] == pytest.approx(0.0, abs=1e-9)
    assert metrics["group_health/b/turn1/advantage_mean"] == pytest.approx(0.0, abs=1e-6)
    # What the actor update fetches is what the batch's metadata lists: the advantage step's batch lists the new
    # fields, the metadata from before it does not (the KeyError 'advantages' every first update once hit).
    assert {"advantages", "returns", "rm_scores"} <= set(returned.fields)
    assert "advantages" not in batch.fields
    policies = [f["policy"] for f in extra]
    parts = split_by_policy(returned, policies, ["a", "b"])
    for policy, part in parts.items():
        fetched = transfer_queue.kv_batch_get(keys=part.keys, partition_id=part.partition_id, select_fields=part.fields)
        assert "advantages" in fetched.keys()
        tags = [fields["policy"] for fields in fetched["extra_fields"]]
        assert set(tags) == {policy}


def test_update_audit_reads_each_rows_advantage_and_logprob_gap_on_its_response_tokens():
    def nested(rows):
        return torch.nested.as_nested_tensor([torch.tensor(r, dtype=torch.float32) for r in rows], layout=torch.jagged)

    extra = [{"task_uid": "T", "role": "a", "turn": 0, "policy": "p", "mixed_reward": r} for r in (1.0, 0.0, 2.0)]
    tags = SampleTags.from_rows(extra, [False, False, True])
    data = TensorDict(
        {
            "response_mask": nested([[1, 1, 0], [0, 0], [1]]),
            "advantages": nested([[0.5, 0.5, 9.0], [7.0, 7.0], [0.0]]),
            "rollout_log_probs": nested([[-1.0, -2.0, -5.0], [-1.0, -1.0], [-1.0]]),
            "old_log_probs": nested([[-1.25, -1.5, 0.0], [0.0, 0.0], [-1.0]]),
        },
        batch_size=3,
    )
    record = update_audit_record(4, "p", ["response_mask", "advantages"], data, tags)
    assert record["step"] == 4 and record["policy"] == "p" and record["fields"] == ["advantages", "response_mask"]
    first, empty, padding = record["rows"]
    # the masked third token (advantage 9, gap 5) is not the response's
    assert (first["advantage"], first["advantage_spread"], first["logprob_gap"]) == (0.5, 0.0, 0.5)
    assert (empty["advantage"], empty["advantage_spread"], empty["logprob_gap"]) == (None, None, None)
    assert padding["padding"] and padding["reward"] == 0.0
    without = update_audit_record(4, "p", ["response_mask"], data.exclude("advantages"), tags)
    assert without["rows"][0]["advantage"] is None and without["rows"][0]["logprob_gap"] == 0.5


def test_update_capture_saves_the_listed_tensor_fields_as_the_worker_fetches_them(transfer_queue, tmp_path):
    masks = [[1, 1, 0], [1], [1, 1]]
    rows = {
        f"capture_{i}": {
            "response_mask": torch.tensor(mask, dtype=torch.int64),
            "advantages": torch.full((len(mask),), 0.25 * i),
            "dummy_tensor": torch.tensor([i, -i]),
            "extra_fields": {"task_uid": f"T{i}", "role": "a"},
        }
        for i, mask in enumerate(masks)
    }
    stored = put_rows(transfer_queue, rows, "capture")
    listed = ["response_mask", "dummy_tensor", "extra_fields"]  # advantages stored, but not in the metadata
    part = KVBatchMeta(
        keys=stored.keys,
        tags=[{"is_padding": False}, {"is_padding": True}, {}],
        partition_id=stored.partition_id,
        fields=listed,
    )
    path = save_update_batch(str(tmp_path / "cap"), 7, "plan", part, fetch_update_batch(part))
    assert path == tmp_path / "cap" / "step_7" / "plan.pt"
    saved = torch.load(path)
    assert (saved["step"], saved["policy"], saved["padding"]) == (7, "plan", [False, True, False])
    assert sorted(saved["tensors"]) == ["dummy_tensor", "response_mask"]  # tags are not tensors; unlisted not fetched
    assert [row.tolist() for row in saved["tensors"]["response_mask"]] == masks
    assert [row.tolist() for row in saved["tensors"]["dummy_tensor"]] == [[0, 0], [1, -1], [2, -2]]


def test_the_audit_and_the_capture_share_one_fetch_of_the_update_batch(transfer_queue, tmp_path, monkeypatch):
    rows = {
        f"both_{i}": {
            "response_mask": torch.tensor([1, 1]),
            "advantages": torch.full((2,), float(i)),
            "extra_fields": {"task_uid": "T", "role": "a", "turn": 0, "policy": "plan", "mixed_reward": float(i)},
        }
        for i in range(2)
    }
    stored = put_rows(transfer_queue, rows, "both")
    part = KVBatchMeta(
        keys=stored.keys, tags=[{}, {}], partition_id=stored.partition_id, fields=["response_mask", "advantages"]
    )
    fetches = []
    fetch = update_record.tq.kv_batch_get
    monkeypatch.setattr(update_record.tq, "kv_batch_get", lambda **kw: fetches.append(kw) or fetch(**kw))
    audit, capture = tmp_path / "audit.jsonl", tmp_path / "cap"
    trainer = SimpleNamespace(global_steps=3)
    UpdateRecorder(audit=str(audit), capture=str(capture)).before_update(trainer, {"plan": part})
    assert len(fetches) == 1 and fetches[0]["select_fields"] == ["response_mask", "advantages", "extra_fields"]
    (record,) = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [row["advantage"] for row in record["rows"]] == [0.0, 1.0]
    assert record["fields"] == ["advantages", "response_mask"]
    saved = torch.load(capture / "step_3" / "plan.pt")
    assert sorted(saved["tensors"]) == ["advantages", "response_mask"]
    trainer.global_steps = 4
    UpdateRecorder(audit=str(audit)).before_update(trainer, {"plan": part})
    assert len(fetches) == 2 and [json.loads(line)["step"] for line in audit.read_text().splitlines()] == [3, 4]
    assert sorted(p.name for p in capture.iterdir()) == ["step_3"]  # the audit alone captures nothing


def test_a_row_the_judge_could_not_run_is_in_no_group_and_counted():
    from verl_mas.metrics import InfraFailureLimit
    from verl_mas.verl_engine.batch import infra_failures

    rows = [{"task_uid": "T", "role": "a", "turn": 0, "policy": "p", "mixed_reward": r} for r in (0.0, 1.0, 2.0)]
    failed = dict(rows[0], mixed_reward=-0.5, infra_failure=True)  # scored as the program failing: it did not run
    tags = SampleTags.from_rows([*rows, failed, dict(failed)], [False, False, False, False, True])
    scores = reward_scores(tags, torch.tensor([1, 1, 1, 1, 1]), 1)
    advantages = at_grpo_advantages(scores, torch.ones(5, 1), tags, "task_role_turn", ALGORITHM)
    # the group is (0, 1, 2): mean 1, std 1; with the failed row it would be (0, 1, 2, -0.5)
    assert advantages[:, 0].tolist() == pytest.approx([-1, 0, 1, 0, 0], abs=1e-5)
    assert tags.infra_failure.tolist() == [False, False, False, True, False]  # a padding row is never one
    assert infra_failures(tags, 0.25) == {"mas/infra_failures": 1.0}
    with pytest.raises(InfraFailureLimit, match=r"1 of 4 samples .* mas.max_infra_failure_share = 0.2"):
        infra_failures(tags, 0.2)


def test_step_group_health_reads_the_rows_that_train_and_finds_a_mislabelled_prompt(caplog):
    extra, padding, lengths, _ = hand_batch()
    failed = dict(extra[0], mixed_reward=-9.0, infra_failure=True)  # the judge could not run it: in no group
    extra, padding = [*extra, failed], [*padding, False]
    lengths = torch.cat([lengths, torch.tensor([2])])
    tags = SampleTags.from_rows(extra, padding)
    width = int(lengths.max())
    mask = mask_of(lengths, width)
    scores = reward_scores(tags, lengths, width)
    advantages = at_grpo_advantages(scores, mask, tags, "task_role_turn", ALGORITHM)
    prompts = [prompt_of(f) for f in extra]
    nested = torch.nested.nested_tensor([torch.tensor(p) for p in prompts], layout=torch.jagged)
    codes = prompt_codes_of(nested)
    assert len(set(codes.tolist())) == 8  # one prompt per (task, role, turn)
    health = step_group_health(tags, scores, advantages, mask, codes, "task_role_turn")
    assert (health.samples, health.groups, health.zero_variance_share) == (24, 8, 0.125)
    assert health.mixed_prompt_share == 0.0
    # per (role, turn) the advantages average 0 (each group is centred), worked out by hand in GROUPS
    assert all(mean == pytest.approx(0.0, abs=1e-6) for mean in health.role_turn_advantage.values())
    assert sorted(health.role_turn_advantage) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    # one row of (T2, b, 0) answered another prompt: its labels are wrong, which the step names
    wrong = next(i for i, f in enumerate(extra) if (f["task_uid"], f["role"], f["turn"]) == ("T2", "b", 0))
    prompts[wrong] = [99]
    nested = torch.nested.nested_tensor([torch.tensor(p) for p in prompts], layout=torch.jagged)
    mislabelled = step_group_health(tags, scores, advantages, mask, prompt_codes_of(nested), "task_role_turn")
    assert mislabelled.mixed_prompt_share == 0.125
    with caplog.at_level("WARNING", logger="verl_mas.group_health"):
        assert GroupHealthWarnings().check(mislabelled, step=3) == ["mixed_prompts"]
    assert "step 3 (mixed_prompts): 12.5% of the 8 advantage groups" in caplog.records[-1].getMessage()
    # under task grouping every task's group mixes its roles' and turns' prompts by design: no problem named
    by_task = step_group_health(tags, scores, advantages, mask, codes, "task")
    assert by_task.groups == 2 and by_task.mixed_prompt_share == 1.0 and "mixed_prompts" not in by_task.problems()
    only_padding = SampleTags.from_rows(extra[:1], [True])
    assert step_group_health(only_padding, scores[:1], advantages[:1], mask[:1], codes[:1], "task") is None
