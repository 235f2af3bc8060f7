"""The mas_agent loop on fake LLM servers, and verl's V1 worker postprocess on its list of outputs."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
import torch
from verl.trainer.ppo.v1 import agent_loop_tq

from mas_testkit import INVALID_PENALTY
from verl_fakes import (
    WEIGHT_VERSION,
    ScriptedServer,
    TinyModelServer,
    counter_row,
    loop_config,
    make_agent_loop,
    tiny_tokenizer,
)
from verl_mas.env import Task
from verl_mas.rollout import EnvironmentFailure, EpisodeResult
from verl_mas.router import PolicyRouter
from verl_mas.sample import Sample
from verl_mas.verl_engine.agent_loop import episode_outputs
from verl_mas.verl_engine.batch import REQUIRED_TAG_KEYS, TAG_KEYS, SampleTag, SampleTags, reward_scores
from verl_mas.verl_engine.routing import PolicyRoutingClient

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
SEED = 3
TARGET = random.Random(SEED).randint(4, 9)  # CounterEnv.reset's rule


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def cycle(*texts):
    return lambda prompt, call: texts[call % len(texts)]


def counter_rewards(value: int, delta: int, alpha: float = 1.0) -> tuple[float, float, float]:
    """(team, local, mixed) of a valid counter move, by the test kit's formulas."""
    after = value + delta
    team = 1 - abs(TARGET - after) / TARGET
    local = (abs(TARGET - value) - abs(TARGET - after)) / 3
    return team, local, alpha * team + local


def per_role_servers(tokenizer, script_a, script_b):
    servers = {"a": ScriptedServer(tokenizer, script_a), "b": ScriptedServer(tokenizer, script_b)}
    return servers, PolicyRoutingClient(servers, PolicyRouter.from_spec("per_role", ("a", "b")))


async def test_outputs_carry_tags_rewards_and_generated_token_masks(tokenizer):
    servers, client = per_role_servers(tokenizer, cycle("1", "2", "oops"), cycle("1", "2", "oops"))
    config = loop_config({"env": "counter", "router": "per_role", "rollout": {"k": 3, "alpha": 0.5, "max_turns": 1}})
    loop = make_agent_loop(config, client, tokenizer)
    outputs = await loop.run(SAMPLING, **counter_row("u1", seed=SEED))

    assert len(outputs) == 6  # 2 roles x 1 turn x K=3
    tags = [(o.extra_fields["role"], o.extra_fields["turn"], o.extra_fields["branch"]) for o in outputs]
    assert tags == [("a", 0, 0), ("a", 0, 1), ("a", 0, 2), ("b", 0, 0), ("b", 0, 1), ("b", 0, 2)]
    assert {o.extra_fields["task_uid"] for o in outputs} == {"u1/0"}
    assert [o.extra_fields["policy"] for o in outputs] == ["a"] * 3 + ["b"] * 3
    # role a moves from 0; "2" is best, so role b moves from 2
    team_a1, local_a1, mixed_a1 = counter_rewards(0, 1, alpha=0.5)
    team_a2, local_a2, mixed_a2 = counter_rewards(0, 2, alpha=0.5)
    team_bad_a = 1 - TARGET / TARGET
    _, _, mixed_b1 = counter_rewards(2, 1, alpha=0.5)
    _, _, mixed_b2 = counter_rewards(2, 2, alpha=0.5)
    team_bad_b = 1 - abs(TARGET - 2) / TARGET
    expected_mixed = [mixed_a1, mixed_a2, 0.5 * team_bad_a + INVALID_PENALTY, mixed_b1, mixed_b2]
    expected_mixed.append(0.5 * team_bad_b + INVALID_PENALTY)
    assert [o.extra_fields["mixed_reward"] for o in outputs] == pytest.approx(expected_mixed)
    assert [o.reward_score for o in outputs] == pytest.approx(expected_mixed)
    assert outputs[1].extra_fields["team_reward"] == pytest.approx(team_a2)
    assert outputs[1].extra_fields["local_reward"] == pytest.approx(local_a2)
    assert [o.extra_fields["continued"] for o in outputs] == [False, True, False, False, True, False]
    assert [o.extra_fields["valid"] for o in outputs] == [True, True, False] * 2
    assert not any(o.extra_fields["env_error"] for o in outputs)
    for output, text in zip(outputs, ["1", "2", "oops"] * 2, strict=True):
        expected_ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        assert output.response_ids == expected_ids
        assert output.response_mask == [1] * len(expected_ids)  # only generated tokens, all of them
        assert output.response_logprobs == [-0.25] * len(expected_ids)
        assert output.extra_fields["min_global_steps"] == output.extra_fields["max_global_steps"] == WEIGHT_VERSION
    assert "role=a value=0" in tokenizer.decode(outputs[0].prompt_ids)
    assert "role=b value=2" in tokenizer.decode(outputs[3].prompt_ids)
    info = outputs[-1].extra_fields["reward_extra_info"]
    assert info == {
        "acc": 0.0,
        "episode_team_reward": pytest.approx(counter_rewards(2, 2)[0]),
        "episode_turns": 1,
        "invalid_moves": 2,
        "env_failures": 0,
    }
    # each role's K candidates went to its own policy's server under one request id
    assert [c.request_id for c in servers["a"].calls] == ["u1/0/a"] * 3
    assert [c.request_id for c in servers["b"].calls] == ["u1/0/b"] * 3
    assert servers["a"].calls[0].sampling_params == SAMPLING


async def test_request_id_is_reused_across_turns_with_a_tiny_model(tokenizer):
    server = TinyModelServer(tokenizer, max_new_tokens=20)
    config = loop_config({"env": "counter", "router": "shared", "rollout": {"k": 2, "max_turns": 2}}, response_length=5)
    loop = make_agent_loop(config, server, tokenizer)  # a plain verl client is enough for one policy
    outputs = await loop.run(SAMPLING, **counter_row("u2", seed=SEED))

    assert len(outputs) == 8  # 2 roles x 2 turns x K=2 (random text never reaches the target)
    assert [c.request_id for c in server.calls] == ["u2/0/a"] * 2 + ["u2/0/b"] * 2 + ["u2/0/a"] * 2 + ["u2/0/b"] * 2
    for output, call in zip(outputs, server.calls, strict=True):
        assert output.prompt_ids == call.prompt_ids
        assert 1 <= len(output.response_ids) <= 5  # cut to rollout.response_length
        assert output.response_mask == [1] * len(output.response_ids)
        assert len(output.response_logprobs) == len(output.response_ids)
        assert all(lp <= 0 for lp in output.response_logprobs)
    assert {o.extra_fields["policy"] for o in outputs} == {"shared"}


async def test_eval_rows_use_the_plain_rollout(tokenizer):
    servers, client = per_role_servers(tokenizer, cycle("1"), cycle("2"))
    config = loop_config({"env": "counter", "router": "per_role", "rollout": {"k": 4, "max_turns": 1}})
    outputs = await make_agent_loop(config, client, tokenizer).run(SAMPLING, **counter_row("v", split="eval"))
    assert len(outputs) == 2 and len(servers["a"].calls) == len(servers["b"].calls) == 1


async def test_environment_failure_is_isolated_and_counted(tokenizer):
    _, client = per_role_servers(tokenizer, cycle("1", "2"), cycle("raise"))
    config = loop_config({"env": "counter", "router": "per_role", "rollout": {"k": 2, "max_turns": 2}})
    outputs = await make_agent_loop(config, client, tokenizer).run(SAMPLING, **counter_row("u3"))
    assert [o.extra_fields["role"] for o in outputs] == ["a", "a"]  # role a's group survived, b's step raised
    assert all(o.extra_fields["env_error"] for o in outputs)
    assert outputs[-1].extra_fields["reward_extra_info"]["env_failures"] == 1


async def test_environment_failing_before_any_sample_fails_the_session(tokenizer):
    _, client = per_role_servers(tokenizer, cycle("1"), cycle("1"))
    config = loop_config({"env": "counter", "router": "per_role", "rollout": {"k": 2}})
    row = counter_row("u4")
    row["extra_info"] = {**row["extra_info"], "options": '{"mode": "diagonal"}'}
    with pytest.raises(EnvironmentFailure, match="no samples"):
        await make_agent_loop(config, client, tokenizer).run(SAMPLING, **row)


def test_several_policies_need_the_routing_client(tokenizer):
    config = loop_config({"env": "counter", "router": "per_role"})
    with pytest.raises(ValueError, match=r"policies \['a', 'b'\] but verl handed one LLM client"):
        make_agent_loop(config, TinyModelServer(tokenizer), tokenizer)
    _, client = per_role_servers(tokenizer, cycle("1"), cycle("1"))
    swapped = loop_config({"env": "counter", "router": {"a": "b", "b": "a"}})
    with pytest.raises(ValueError, match="routes"):
        make_agent_loop(swapped, client, tokenizer)


def test_empty_response_is_one_masked_eos_that_keeps_its_reward():
    sample = Sample("t/0", "a", 0, 0, "shared", (5, 6), (), None, 0.0, -1.0, -1.0, False, valid=False)
    kept = Sample("t/0", "a", 0, 1, "shared", (5, 6), (9,), (-0.5,), 1.0, 0.0, 1.0, True)
    result = EpisodeResult(task=Task("t/0", "counter", 1), samples=[sample, kept], turns=1)
    outputs = episode_outputs(result, eos_token_id=2)
    assert (outputs[0].response_ids, outputs[0].response_mask) == ([2], [0])
    assert outputs[0].reward_score == -1.0
    assert outputs[0].response_logprobs is None and outputs[1].response_logprobs is None  # not every sample has them
    assert "min_global_steps" not in outputs[0].extra_fields


def test_the_tags_the_loop_writes_are_the_schema_sample_tags_reads_back():
    judged = Sample("t/0", "a", 0, 1, "pa", (5,), (9,), None, 0.25, -0.5, -0.25, False, valid=False)
    unjudged = Sample("t/0", "b", 1, 2, "pb", (5,), (9,), None, 1.0, 0.5, 1.5, True, infra_failure="sandbox died")
    result = EpisodeResult(task=Task("t/0", "counter", 1), samples=[judged, unjudged], turns=2, error="env raised")
    extra = [o.extra_fields for o in episode_outputs(result, eos_token_id=2, weight_versions=[4])]
    outside_the_schema = {"reward_extra_info", "min_global_steps", "max_global_steps"}
    assert [set(e) - outside_the_schema for e in extra] == [set(TAG_KEYS)] * 2  # nothing written outside SampleTag
    assert [SampleTag(**{key: e[key] for key in TAG_KEYS}) for e in extra] == [
        SampleTag(
            "t/0", "a", 0, "pa", -0.25, env_error=True, valid=False, branch=1, team_reward=0.25, local_reward=-0.5
        ),
        SampleTag(
            "t/0", "b", 1, "pb", 1.5, True, True, True, branch=2, team_reward=1.0, local_reward=0.5, continued=True
        ),
    ]
    tags = SampleTags.from_rows(extra, [False, False])
    assert tags.task_uid.tolist() == ["t/0", "t/0"]
    assert (tags.role.tolist(), tags.turn.tolist(), tags.policy.tolist()) == (["a", "b"], [0, 1], ["pa", "pb"])
    assert tags.mixed_reward.tolist() == [-0.25, 1.5]
    assert tags.env_error.tolist() == [True, True]
    assert tags.valid.tolist() == [False, True]
    assert tags.infra_failure.tolist() == [False, True]
    assert tags.trained.tolist() == [True, False]


def test_a_real_row_missing_a_required_tag_is_named_but_a_padding_row_needs_none():
    written = SampleTag("t/0", "a", 0, "pa", 0.5).fields()
    for key in REQUIRED_TAG_KEYS:
        with pytest.raises(ValueError, match=rf"row 1 has no extra_fields \['{key}'\]"):
            SampleTags.from_rows([written, {k: v for k, v in written.items() if k != key}], [False, False])
    tags = SampleTags.from_rows([written, {}], [False, True])
    assert tags.mixed_reward.tolist() == [0.5, 0.0] and tags.trained.tolist() == [True, False]


async def test_verl_worker_postprocess_stores_one_row_per_sample(tokenizer, transfer_queue):
    """verl copies the last output's reward over the list; the trainer restores each row's own from extra_fields.
    The rows go through verl's real TransferQueue and are read back as the trainer reads them."""
    _, client = per_role_servers(tokenizer, cycle("1", "3", "?"), cycle("2", "1", "0"))
    config = loop_config({"env": "counter", "router": "per_role", "rollout": {"k": 3, "max_turns": 1}})
    row = counter_row("u5", seed=SEED)
    outputs = await make_agent_loop(config, client, tokenizer).run(SAMPLING, **row)
    mixed = [o.extra_fields["mixed_reward"] for o in outputs]

    worker = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__.__new__(
        agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__
    )
    worker.tokenizer, worker.processor, worker.mm_processor_kwargs = tokenizer, None, {}
    # no reward-loop workers, as every verl-mas run has: an output without its own score would fail here
    worker.reward_loop_worker_handles, worker.distillation_enabled = [], False
    await worker._agent_loop_postprocess(outputs, False, **row)

    stored = transfer_queue.kv_list("train")["train"]
    keys = sorted(key for key in stored if key.startswith("u5_"))
    tags = [stored[key] for key in keys]
    fields = transfer_queue.kv_batch_get(
        keys=keys, partition_id="train", select_fields=["responses", "rm_scores", "extra_fields", "uid"]
    )
    partition = "train"
    assert partition == "train"
    assert keys == [f"u5_0_{i}" for i in range(6)]
    lengths = torch.tensor([len(fields["responses"][i]) for i in range(6)])
    assert lengths.tolist() == [len(o.response_ids) for o in outputs]
    assert [t["global_steps"] for t in tags] == [1] * 6
    assert [t["min_global_steps"] for t in tags] == [WEIGHT_VERSION] * 6
    stored = [float(fields["rm_scores"][i].sum()) for i in range(6)]
    assert stored == pytest.approx([mixed[-1]] * 6)  # verl's broadcast of the last output's reward
    extra = list(fields["extra_fields"])
    assert [e["role"] for e in extra] == ["a"] * 3 + ["b"] * 3
    read_back = SampleTags.from_rows(extra, [False] * 6)
    written = SampleTags.from_rows([o.extra_fields for o in outputs], [False] * 6)
    for column in dataclasses.fields(SampleTags):  # TransferQueue keeps every tag as the loop wrote it
        assert getattr(read_back, column.name).tolist() == getattr(written, column.name).tolist(), column.name
    restored = reward_scores(read_back, lengths, int(lengths.max()))
    assert restored.sum(dim=1).tolist() == pytest.approx(mixed)
    last_token = torch.nn.functional.one_hot(lengths - 1, int(lengths.max())).bool()
    assert torch.all(restored[~last_token] == 0)
    assert list(fields["uid"]) == ["u5"] * 6


async def test_fake_servers_answer_as_verls_vllm_server_does(tokenizer):
    """The fakes keep the contract of verl's vLLM server for a finished generation (which the CPU-stack tests run for
    real): a TokenOutput with token ids, one log-prob per token, a stop reason, and the server's weight version in
    extra_fields["global_steps"] (the agent-loop worker turns it into the rows' min/max_global_steps tags)."""
    import verl

    source = (Path(verl.__file__).parent / "workers/rollout/vllm_rollout/vllm_async_server.py").read_text()
    finished = source[source.index("return TokenOutput(\n            token_ids=token_ids,") :].split(")", 1)[0]
    assert {"token_ids=token_ids", "log_probs=log_probs", "stop_reason=stop_reason"} <= {
        part.strip().rstrip(",") for part in finished.splitlines()[1:]
    }
    assert 'extra_fields = {"global_steps": self.global_steps}' in source
    prompt = tokenizer.encode("role=a value=0", add_special_tokens=False)
    for server in (TinyModelServer(tokenizer), ScriptedServer(tokenizer, cycle("1"))):
        output = await server.generate("r", prompt_ids=prompt, sampling_params={"temperature": 1.0})
        assert output.token_ids and len(output.log_probs) == len(output.token_ids)
        assert output.extra_fields["global_steps"] == WEIGHT_VERSION
