"""Group health on hand-made batches, one per failure class, its warning, and the check of a plain verl GRPO batch."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from verl_mas.advantage import compute_at_grpo_advantage
from verl_mas.group_health import (
    NEARLY_ALL_ZERO_VARIANCE,
    GroupHealthWarnings,
    coarser_metrics,
    group_health,
    padded_prompt_codes,
    prompt_codes,
    row_advantages,
    sample_coarser_health,
    sample_group_health,
    verl_batch_coarser_health,
    verl_batch_health,
)
from verl_mas.sample import Sample


def sample(task: str, role: str, turn: int, reward: float, prompt: tuple[int, ...]) -> Sample:
    return Sample(task, role, turn, 0, "shared", prompt, (7,), None, reward, 0.0, reward, False)


def health_of(samples: list[Sample], grouping: str, tree: bool = True):
    rewards = torch.tensor([[s.reward] for s in samples])
    advantages, _ = compute_at_grpo_advantage(
        rewards,
        torch.ones_like(rewards),
        index=[s.task_uid for s in samples],
        role=[s.role for s in samples],
        turn=[s.turn for s in samples],
        grouping=grouping,
    )
    return sample_group_health(samples, advantages[:, 0], grouping, tree=tree)


def test_singleton_groups_are_counted_and_left_out_of_the_zero_variance_share():
    # groups g0 (2 samples, rewards differ), g1, g2, g3 (one sample each)
    health = group_health(
        [0.0, 1.0, 5.0, 5.0, 5.0], [-1, 1, 0, 0, 0], ["g0", "g0", "g1", "g2", "g3"], [0, 0, 1, 2, 3],
        grouping="uid", expects_one_prompt=True,
    )  # fmt: skip
    assert (health.groups, health.samples) == (4, 5)
    assert health.singleton_share == 0.75
    assert health.zero_variance_share == 0.0  # the one group of two spreads; singletons have no variance to have
    assert list(health.problems()) == ["singletons"]  # three groups in four hold one sample: they train nothing
    assert "75.0% of the 4 advantage groups (grouped by uid) hold a single sample" in health.problems()["singletons"]


def test_a_batch_of_per_trajectory_groups_is_named_as_such():
    # rLLM #776's batch: a uid per trajectory instead of per prompt. Prompt p's 4 samples in 4 groups, prompt q's in
    # one: 4 of the 5 groups are singletons, and advantages per prompt no longer centre on the prompt.
    rewards = [1.0, 0.0, 1.0, 0.0, 3.0, 1.0, 2.0, 2.0]
    groups = ["a", "b", "c", "d", "q", "q", "q", "q"]
    prompts = ["p"] * 4 + ["q"] * 4
    advantages = [0.0, 0.0, 0.0, 0.0, 1.2, -1.2, 0.0, 0.0]
    health = group_health(rewards, advantages, groups, prompts, grouping="uid", expects_one_prompt=True)
    assert (health.groups, health.singleton_share) == (5, 0.8)
    assert "singletons" in health.problems() and "uid made per trajectory" in health.problems()["singletons"]
    # half the groups singletons still warns; under half does not
    half = group_health([0, 1, 5], [0, 0, 0], ["g", "g", "h"], [0, 0, 1], grouping="uid", expects_one_prompt=True)
    assert half.singleton_share == 0.5 and "singletons" in half.problems()
    fewer = group_health([0, 1, 0, 1, 5], [0] * 5, list("gghhi"), [0, 0, 1, 1, 2], grouping="uid",
                         expects_one_prompt=True)  # fmt: skip
    assert fewer.singleton_share == pytest.approx(1 / 3) and "singletons" not in fewer.problems()
    # groups that may be small by design (the no-tree ablation, coarse groupings) are not warned of
    loose = group_health(rewards, advantages, groups, prompts, grouping="task_role_turn", expects_one_prompt=False)
    assert loose.singleton_share == 0.8 and "singletons" not in loose.problems()


def test_nearly_all_zero_variance_groups_are_a_problem_and_a_few_are_not():
    rewards = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 0.0, 1.0, 0.0]
    groups = np.repeat(np.arange(4), 3)
    health = group_health(rewards, np.zeros(12), groups, groups, grouping="task", expects_one_prompt=False)
    assert health.zero_variance_share == 0.75  # three of four: a lot, not nearly all
    assert health.problems() == {}
    flat = group_health(np.ones(12), np.zeros(12), groups, groups, grouping="task", expects_one_prompt=False)
    assert flat.zero_variance_share == 1.0 >= NEARLY_ALL_ZERO_VARIANCE
    assert list(flat.problems()) == ["zero_variance"]
    assert "zero reward variance (100.0% of the groups" in flat.problems()["zero_variance"]
    assert flat.prompt_offset_share == 0.0  # no variance at all: defined as 0, not NaN


def test_a_task_role_turn_group_mixing_prompts_is_a_bug_under_the_tree_rollout():
    samples = [
        sample("t", "plan", 0, 1.0, (1, 2)),
        sample("t", "plan", 0, 0.0, (1, 2)),
        sample("t", "plan", 0, 0.0, (1, 3)),  # another prompt in (t, plan, 0): mislabelled
        sample("t", "tool", 0, 1.0, (4,)),
        sample("t", "tool", 0, 0.0, (4,)),
    ]
    health = health_of(samples, "task_role_turn")
    assert health.groups == 2 and health.mixed_prompt_share == 0.5
    assert list(health.problems()) == ["mixed_prompts"]
    assert "50.0% of the 2 advantage groups (grouped by task_role_turn)" in health.problems()["mixed_prompts"]
    # the no-tree ablation's groups mix states (prompts) by design, and so do the coarser groupings
    assert health_of(samples, "task_role_turn", tree=False).problems() == {}
    assert health_of(samples, "task").mixed_prompt_share == 1.0
    assert health_of(samples, "task").problems() == {}


def test_prompt_offsets_under_task_grouping_give_the_hand_computed_variance_share():
    # One task, the plan's prompt scored 2 and 4, the tool's 0 and 0: one group of four under "task".
    samples = [
        sample("t", "plan", 0, 2.0, (1,)),
        sample("t", "plan", 0, 4.0, (1,)),
        sample("t", "tool", 0, 0.0, (2,)),
        sample("t", "tool", 0, 0.0, (2,)),
    ]
    # mean 1.5, deviations (0.5, 2.5, -1.5, -1.5), one std s for all: advantages d / s. The prompt means are 1.5 / s
    # and -1.5 / s, so B = 2.25 / s^2; V = (0.25 + 6.25 + 2.25 + 2.25) / 4 / s^2 = 2.75 / s^2; B / V = 9 / 11.
    by_task = health_of(samples, "task")
    assert by_task.prompt_offset_share == pytest.approx(9 / 11, rel=1e-6)
    assert by_task.groups == 1 and by_task.zero_variance_share == 0.0
    # AT-GRPO centres each prompt's group on its own mean: no offset left
    assert health_of(samples, "task_role_turn").prompt_offset_share == pytest.approx(0.0, abs=1e-12)


def test_the_offset_share_on_given_advantages():
    # prompt p: 1 and 3 (mean 2), prompt q: -1 and -3 (mean -2); batch mean 0: B = 4, V = (1 + 9 + 1 + 9) / 4 = 5
    health = group_health(
        [0, 0, 0, 0], [1.0, 3.0, -1.0, -3.0], [0, 0, 0, 0], ["p", "p", "q", "q"], grouping="task",
        expects_one_prompt=False,
    )  # fmt: skip
    assert health.prompt_offset_share == pytest.approx(0.8)
    same_per_prompt = group_health(
        [0, 0, 0, 0], [2.0, 2.0, -2.0, -2.0], [0, 0, 0, 0], ["p", "p", "q", "q"], grouping="task",
        expects_one_prompt=False,
    )  # fmt: skip
    assert same_per_prompt.prompt_offset_share == pytest.approx(1.0)


def test_a_clean_tree_batch_has_no_mixed_prompts_and_no_prompt_offset():
    rng = np.random.default_rng(3)
    samples = []
    for task in ("t0", "t1", "t2"):
        for role, offset in (("plan", 2.0), ("tool", -1.0)):  # a role offset that task grouping would leave in
            for turn in (0, 1):
                prompt = (int(task[1]), len(role) + int(offset), turn)
                samples += [sample(task, role, turn, offset + float(r), prompt) for r in rng.integers(0, 3, size=4)]
    health = health_of(samples, "task_role_turn")
    assert health.groups == 12 and health.singleton_share == 0.0
    assert health.mixed_prompt_share == 0.0
    assert health.prompt_offset_share == pytest.approx(0.0, abs=1e-12)
    assert "mixed_prompts" not in health.problems()
    assert health_of(samples, "task").prompt_offset_share > 0.3  # the same samples, grouped per task


def test_mean_advantage_per_role_and_turn_and_the_metric_names():
    health = group_health(
        [0, 1, 0, 1, 0], [1.0, 3.0, -2.0, 0.5, 0.25], [0, 0, 1, 1, 2], [0, 0, 1, 1, 2],
        role=["b", "b", "a", "a", "b"], turn=[0, 0, 1, 1, 1], grouping="task_role_turn", expects_one_prompt=True,
    )  # fmt: skip
    assert health.role_turn_advantage == {("a", 1): -0.75, ("b", 0): 2.0, ("b", 1): 0.25}
    metrics = health.metrics("gh")
    assert metrics["gh/a/turn1/advantage_mean"] == -0.75
    assert metrics["gh/groups"] == 3.0 and metrics["gh/singleton_share"] == pytest.approx(1 / 3)
    assert set(metrics) >= {f"gh/{name}" for name in ("mixed_prompt_share", "prompt_offset_share", "samples")}
    assert all(isinstance(v, float) for v in metrics.values())


def test_the_warning_fires_once_per_cause_and_names_it(caplog):
    groups = np.repeat(np.arange(3), 2)
    flat = group_health(np.ones(6), np.zeros(6), groups, groups, grouping="task_role_turn", expects_one_prompt=True)
    mixed = group_health(
        [0, 1, 0, 1, 2, 2], np.zeros(6), groups, [0, 1, 2, 2, 3, 3], grouping="task_role_turn", expects_one_prompt=True
    )
    warnings = GroupHealthWarnings()
    with caplog.at_level(logging.WARNING, logger="verl_mas.group_health"):
        assert warnings.check(flat, step=1) == ["zero_variance"]
        assert warnings.check(flat, step=2) == []
        assert warnings.check(mixed, step=3) == ["mixed_prompts"]
        assert warnings.check(mixed, step=4) == []
    records = [r for r in caplog.records if r.name == "verl_mas.group_health"]
    assert [r.levelno for r in records] == [logging.WARNING] * 2
    assert "step 1 (zero_variance): nearly every advantage group has zero reward variance" in records[0].getMessage()
    assert "step 3 (mixed_prompts)" in records[1].getMessage()
    assert "answered different prompts" in records[1].getMessage()


def test_prompt_codes_tell_prompts_apart_by_their_tokens_not_their_padding():
    assert prompt_codes([(1, 2), (1, 2, 3), (1, 2), [1, 2, 3]]).tolist() == [0, 1, 0, 1]
    ids = torch.tensor([[0, 0, 5, 6], [5, 6, 0, 0], [0, 0, 5, 6], [0, 5, 6, 0]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 1, 1], [0, 1, 1, 0]])
    codes = padded_prompt_codes(ids, mask)
    assert codes[0] == codes[1] == codes[3] != codes[2]  # row 2's 0 is a token: the prompt (0, 5, 6)
    assert len(set(padded_prompt_codes(ids).tolist())) == 3  # without a mask, every position counts


def test_row_advantages_are_the_response_token_mean_and_zero_without_tokens():
    advantages = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [-2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
    assert row_advantages(advantages, mask).tolist() == [0.5, 0.0, -2.0]


@pytest.mark.parametrize(
    ("rewards", "advantages", "groups", "match"),
    [
        ([], [], [], "empty batch"),
        ([0.0, 1.0], [0.0], [0, 0], "advantages has 1 entries for a batch of 2"),
        ([0.0, np.nan], [0.0, 0.0], [0, 0], r"non-finite rewards in rows \[1\]"),
        ([0.0, 1.0], [np.inf, 0.0], [0, 0], r"non-finite advantages in rows \[0\]"),
        ([0.0, 1.0], [0.0, 0.0], [0], "groups has 1 entries"),
    ],
)
def test_hostile_inputs_fail_naming_what_is_wrong(rewards, advantages, groups, match):
    with pytest.raises(ValueError, match=match):
        group_health(rewards, advantages, groups, [0] * len(rewards), grouping="task", expects_one_prompt=False)


def grpo_batch(prompts: list[list[int]], uids: list[str], rewards: list[float], pad: int = 0):
    """A DataProto laid out as verl's GRPO trainer has it after its advantage step: left-padded prompts, right-padded
    responses, attention and response masks, the outcome reward on each response's last token, `uid` per row, and
    advantages from verl's own `compute_advantage` (GRPO)."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.ray_trainer import compute_advantage

    n, width, response_width = len(prompts), max(map(len, prompts)), 3
    prompt_ids = torch.full((n, width), pad)
    prompt_mask = torch.zeros((n, width), dtype=torch.long)
    for i, ids in enumerate(prompts):
        prompt_ids[i, width - len(ids) :] = torch.tensor(ids)
        prompt_mask[i, width - len(ids) :] = 1
    lengths = torch.tensor([1 + i % response_width for i in range(n)])
    response_mask = (torch.arange(response_width).unsqueeze(0) < lengths.unsqueeze(1)).long()
    responses = torch.randint(1, 50, (n, response_width)) * response_mask
    token_rewards = torch.zeros((n, response_width))
    token_rewards[torch.arange(n), lengths - 1] = torch.tensor(rewards)
    data = DataProto.from_dict(
        tensors={
            "prompts": prompt_ids,
            "responses": responses,
            "input_ids": torch.cat([prompt_ids, responses], dim=1),
            "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
            "response_mask": response_mask,
            "token_level_rewards": token_rewards,
        },
        non_tensors={"uid": np.array(uids, dtype=object)},
    )
    return compute_advantage(data, adv_estimator=AdvantageEstimator.GRPO)


def test_the_standalone_check_reads_a_plain_verl_grpo_batch(caplog):
    # two prompts (of other lengths, so other padding), n = 3 each; prompt B's group all scored 1
    prompts = [[11, 12, 13]] * 3 + [[21, 22]] * 3
    uids = ["A"] * 3 + ["B"] * 3
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    data = grpo_batch(prompts, uids, rewards)
    health = verl_batch_health(data)
    assert (health.grouping, health.groups, health.samples) == ("uid", 2, 6)
    assert health.singleton_share == 0.0 and health.zero_variance_share == 0.5
    assert health.mixed_prompt_share == 0.0
    assert health.prompt_offset_share == pytest.approx(0.0, abs=1e-12)  # GRPO centres each uid, one prompt each
    assert health.problems() == {}
    # verl's GRPO advantages as the update sees them: (r - mean) / (std + eps) in group A, 0 in B
    s = np.std([1.0, 0.0, 0.0], ddof=1)
    expected = [2 / 3 / s, -1 / 3 / s, -1 / 3 / s, 0.0, 0.0, 0.0]
    assert row_advantages(data.batch["advantages"], data.batch["response_mask"]) == pytest.approx(expected, rel=1e-4)

    # a uid that names two prompts: the batch was grouped wrong
    mixed = grpo_batch(prompts, ["A", "A", "A", "A", "B", "B"], rewards)
    health = verl_batch_health(mixed)
    assert health.mixed_prompt_share == 0.5
    with caplog.at_level(logging.WARNING, logger="verl_mas.group_health"):
        assert GroupHealthWarnings().check(health) == ["mixed_prompts"]
    assert "grouped by uid" in caplog.records[-1].getMessage()


def test_the_standalone_check_reads_prompts_from_input_ids_and_names_missing_keys():
    data = grpo_batch([[11, 12, 13]] * 2 + [[21, 22]] * 2, ["A", "A", "B", "B"], [1.0, 0.0, 0.0, 1.0])
    full = verl_batch_health(data)
    data.batch.pop("prompts")
    assert verl_batch_health(data) == full
    data.batch.pop("advantages")
    with pytest.raises(ValueError, match="no 'advantages'"):
        verl_batch_health(data)
    with pytest.raises(ValueError, match=r"non_tensor_batch\['group'\]"):
        verl_batch_health(data, group_key="group")


def test_an_at_grpo_batch_shows_what_each_coarser_grouping_would_leave_of_its_offsets():
    # The offsets test's batch, trained under AT-GRPO: plan's prompt scored 2 and 4, tool's 0 and 0 (one task).
    samples = [
        sample("t", "plan", 0, 2.0, (1,)),
        sample("t", "plan", 0, 4.0, (1,)),
        sample("t", "tool", 0, 0.0, (2,)),
        sample("t", "tool", 0, 0.0, (2,)),
    ]
    task_role, task = sample_coarser_health(samples, "task_role_turn", norm_adv_by_std=True)
    assert (task_role.grouping, task.grouping) == ("task_role", "task")
    assert task_role.prompt_offset_share == pytest.approx(0.0, abs=1e-12)  # one prompt per role here: nothing left
    assert task.prompt_offset_share == pytest.approx(9 / 11, rel=1e-6)  # the hand-computed share of the offsets test
    assert task.groups == 1 and task.mixed_prompt_share == 1.0 and task.problems() == {}  # mixing is expected there
    metrics = coarser_metrics([task_role, task])
    assert metrics["group_health/task/prompt_offset_share"] == pytest.approx(9 / 11, rel=1e-6)
    assert metrics["group_health/task_role/groups"] == 2.0 and not any("advantage_mean" in key for key in metrics)
    # centring alone (norm_adv_by_std false) leaves the same share: B / V does not change with one common scale
    (_, unscaled) = sample_coarser_health(samples, "task_role_turn", norm_adv_by_std=False)
    assert unscaled.prompt_offset_share == pytest.approx(9 / 11, rel=1e-6)
    assert sample_coarser_health(samples, "task", norm_adv_by_std=True) == []  # nothing is coarser than task


def test_a_plain_verl_batch_with_roles_shows_what_coarser_groupings_would_leave():
    # the same scores as a plain verl batch: plan's prompt scored 2 and 4 (uid p), tool's 0 and 0 (uid t), one task
    data = grpo_batch([[11, 12]] * 2 + [[21, 22]] * 2, ["p", "p", "t", "t"], [2.0, 4.0, 0.0, 0.0])
    data.non_tensor_batch["index"] = np.array(["task0"] * 4, dtype=object)
    data.non_tensor_batch["role"] = np.array(["plan", "plan", "tool", "tool"], dtype=object)
    data.non_tensor_batch["turn"] = np.array([0, 0, 0, 0])
    task_role, task = verl_batch_coarser_health(data)
    assert (task_role.grouping, task.grouping) == ("task_role", "task")
    assert task_role.prompt_offset_share == pytest.approx(0.0, abs=1e-12)
    assert task.prompt_offset_share == pytest.approx(9 / 11, rel=1e-6)  # between-prompt SS 9 of 11, by hand
    assert coarser_metrics([task_role, task])["group_health/task/groups"] == 1.0
    data.non_tensor_batch.pop("role")
    with pytest.raises(ValueError, match=r"no non_tensor_batch\['role'\]"):
        verl_batch_coarser_health(data)
