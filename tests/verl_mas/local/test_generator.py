"""BatchingGenerator: real batching, per-policy routing, padding-invariance, eos, determinism, truncation."""

import asyncio
import math
import os
import time

import pytest
import torch

from mas_testkit import BlockingCounterEnv
from verl_mas.env import Task
from verl_mas.local.generator import BatchingGenerator, PolicyModel, SamplingConfig, sample_batch
from verl_mas.local.model import build_tiny_model
from verl_mas.local.tokenizer import train_tokenizer
from verl_mas.rollout import GenerationRequest, RolloutConfig, rollout_tasks
from verl_mas.router import PolicyRouter

CORPUS = [f"the sum of {a} and {b} is {a + b}. move up, then left!" for a in range(20) for b in range(20)]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=320)


def tiny(tokenizer, seed=0):
    return build_tiny_model(
        len(tokenizer), hidden=32, layers=2, heads=4, seed=seed, eos_token_id=tokenizer.eos_token_id
    )


def with_logit_bias(model, bias: dict[int, float], keep_weights: bool = True):
    """Give the LM head a bias (a property of the model, not a sampling processor); zero weights force a token."""
    old = model.lm_head
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight if keep_weights else torch.zeros_like(old.weight))
        head.bias.zero_()
        for token, value in bias.items():
            head.bias[token] = value
    model.lm_head = head
    return model


def forced(tokenizer, token: int, seed=0):
    return with_logit_bias(tiny(tokenizer, seed), {token: 50.0}, keep_weights=False)


def count_forwards(model) -> list[int]:
    """Batch size of every forward pass of `model`, in order."""
    sizes: list[int] = []
    model.register_forward_pre_hook(
        lambda _m, _args, kwargs: sizes.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    return sizes


def request(i: int, policy: str = "p", n: int = 4, text: str | None = None, role: str = "solver") -> GenerationRequest:
    content = text if text is not None else "move " * (i % 5 + 1) + f"sum {i}"
    return GenerationRequest(f"task{i}/{role}", policy, role, ({"role": "user", "content": content},), n)


def run_all(generate, requests):
    async def main():
        return await asyncio.gather(*(generate(r) for r in requests))

    return asyncio.run(main())


def test_concurrent_requests_share_one_batched_call_per_decode_step(tokenizer):
    model = with_logit_bias(tiny(tokenizer), {tokenizer.eos_token_id: -1e4})  # never stops: exact step count
    sizes = count_forwards(model)
    generate = BatchingGenerator({"p": (model, tokenizer)}, SamplingConfig(max_new_tokens=6), seed=0)
    results = run_all(generate, [request(i) for i in range(8)])
    assert [len(r) for r in results] == [4] * 8
    assert generate.stats.flushes == 1 and generate.stats.batched_calls == 1
    # One prefill of the 8 distinct prompts, then 5 decode steps over all 32 sequences.
    assert sizes == [8] + [32] * 5
    assert generate.stats.forward_calls == 6
    assert all(len(g.response_ids) == 6 for r in results for g in r)


def test_sequential_requests_are_not_batched(tokenizer):
    generate = BatchingGenerator({"p": (tiny(tokenizer), tokenizer)}, SamplingConfig(max_new_tokens=3))

    async def one_by_one():
        for i in range(3):
            await generate(request(i))

    asyncio.run(one_by_one())
    assert generate.stats.flushes == 3 and generate.stats.batched_calls == 3


def test_requests_from_nested_gathers_land_in_one_batch(tokenizer):
    generate = BatchingGenerator({"p": (tiny(tokenizer), tokenizer)}, SamplingConfig(max_new_tokens=3))

    async def task(t):
        await asyncio.sleep(0)  # tasks reach generate at different ticks, as in a rollout
        return await asyncio.gather(*(generate(request(10 * t + role, n=2)) for role in range(2)))

    async def main():
        return await asyncio.gather(*(task(t) for t in range(5)))

    asyncio.run(main())
    assert generate.stats.flushes == 1 and generate.stats.sequences == 20


def test_batch_limit_splits_rows_into_several_calls(tokenizer):
    model = tiny(tokenizer)
    sizes = count_forwards(model)
    generate = BatchingGenerator({"p": (model, tokenizer)}, SamplingConfig(max_new_tokens=2), max_batch_sequences=10)
    run_all(generate, [request(i) for i in range(8)])
    assert generate.stats.batched_calls == 4  # 32 rows in chunks of 10, 10, 10, 2
    assert max(sizes) <= 10


def test_each_request_uses_its_policys_model(tokenizer):
    token_a, token_b = (tokenizer.convert_tokens_to_ids(t) for t in ("a", "b"))
    model_a, model_b = forced(tokenizer, token_a, seed=1), forced(tokenizer, token_b, seed=2)
    sizes_a, sizes_b = count_forwards(model_a), count_forwards(model_b)
    generate = BatchingGenerator(
        {"alice": (model_a, tokenizer), "bob": PolicyModel(model_b, tokenizer)}, SamplingConfig(max_new_tokens=4)
    )
    requests = [request(i, policy="alice" if i % 2 else "bob", n=3) for i in range(6)]
    results = run_all(generate, requests)
    for req, gens in zip(requests, results, strict=True):
        expected = token_a if req.policy == "alice" else token_b
        assert all(g.response_ids == (expected,) * 4 for g in gens)
        assert all(g.text == ("a" if req.policy == "alice" else "b") * 4 for g in gens)
    assert generate.stats.batched_calls == 2  # one per model, not per request
    assert sizes_a == [3, 9, 9, 9] and sizes_b == [3, 9, 9, 9]


def test_policies_sharing_a_model_are_batched_together(tokenizer):
    model = tiny(tokenizer)
    generate = BatchingGenerator(
        {"planner": (model, tokenizer), "coder": (model, tokenizer)}, SamplingConfig(max_new_tokens=3)
    )
    run_all(generate, [request(i, policy="planner" if i % 2 else "coder") for i in range(4)])
    assert generate.stats.batched_calls == 1


def test_unknown_policy_is_rejected_with_known_names(tokenizer):
    generate = BatchingGenerator({"p": (tiny(tokenizer), tokenizer)}, SamplingConfig())
    with pytest.raises(KeyError, match=r"unknown policy 'q'; known: \['p'\]"):
        run_all(generate, [request(0, policy="q")])


def test_prompt_alone_and_inside_padded_batch_agree(tokenizer):
    model = tiny(tokenizer, seed=3)
    config = SamplingConfig(greedy=True, max_new_tokens=8)
    eos, pad = frozenset({tokenizer.eos_token_id}), tokenizer.pad_token_id
    short = tokenizer.encode("<bos><|user|>sum 3<eos><|assistant|>", add_special_tokens=False)
    longer = [tokenizer.encode("the sum of 12 and 7 is 19. " * k, add_special_tokens=False) for k in (2, 5)]
    alone = sample_batch(model, [short], config, eos_ids=eos, pad_id=pad, generator=torch.Generator())[0]
    batched = sample_batch(
        model, [longer[0], short, longer[1], short], config, eos_ids=eos, pad_id=pad, generator=torch.Generator()
    )
    for seq in (batched[1], batched[3]):
        assert seq.response_ids == alone.response_ids
        assert torch.allclose(torch.tensor(seq.logprobs), torch.tensor(alone.logprobs), atol=1e-4, rtol=0)


def test_eos_ends_a_response_and_is_kept(tokenizer):
    eos = tokenizer.eos_token_id
    generate = BatchingGenerator({"p": (forced(tokenizer, eos), tokenizer)}, SamplingConfig(max_new_tokens=5))
    [gens] = run_all(generate, [request(0, n=2)])
    assert [(g.response_ids, g.text, len(g.logprobs)) for g in gens] == [((eos,), "", 1)] * 2


def test_mixed_lengths_stop_at_eos_or_at_max_new_tokens(tokenizer):
    eos, limit = tokenizer.eos_token_id, 12
    # P(eos) about 1/10 per step whatever the vocabulary size: some rows stop early, others reach the limit
    model = with_logit_bias(tiny(tokenizer), {eos: math.log(len(tokenizer) / 9)})
    generate = BatchingGenerator({"p": (model, tokenizer)}, SamplingConfig(max_new_tokens=limit), seed=5)
    gens = [g for r in run_all(generate, [request(i) for i in range(8)]) for g in r]
    lengths = [len(g.response_ids) for g in gens]
    for g in gens:
        assert len(g.logprobs) == len(g.response_ids)
        assert eos not in g.response_ids[:-1]
        assert g.response_ids[-1] == eos or len(g.response_ids) == limit
    assert min(lengths) < limit and any(g.response_ids[-1] != eos for g in gens), lengths


def test_a_roles_token_limit_caps_its_rows_in_a_shared_batch(tokenizer):
    model = with_logit_bias(tiny(tokenizer), {tokenizer.eos_token_id: -1e4})  # never stops: every row hits its limit
    sizes = count_forwards(model)
    sampling = SamplingConfig(max_new_tokens=7, role_max_new_tokens={"plan": 2})

    generate = BatchingGenerator({"p": (model, tokenizer)}, sampling, seed=1)
    roles = ["plan", "tool", "plan"]
    results = run_all(generate, [request(i, n=2, text=f"sum {i}", role=role) for i, role in enumerate(roles)])
    assert [[len(g.response_ids) for g in gens] for gens in results] == [[2, 2], [7, 7], [2, 2]]
    assert all(len(g.logprobs) == len(g.response_ids) for gens in results for g in gens)
    # One batch: prefill and the first decode step carry all six rows, then the two tool rows go on alone.
    assert sizes == [3, 6, 2, 2, 2, 2, 2]


def test_row_limits_equal_to_max_new_tokens_draw_exactly_the_same_samples(tokenizer):
    model = tiny(tokenizer, seed=2)
    prompts = [tokenizer.encode(f"sum {i} and {i}", add_special_tokens=False) for i in range(3)]
    eos, pad = frozenset({tokenizer.eos_token_id}), tokenizer.pad_token_id
    config = SamplingConfig(max_new_tokens=6)

    def draw(**kw):
        return sample_batch(
            model, prompts, config, eos_ids=eos, pad_id=pad, generator=torch.Generator().manual_seed(0), **kw
        )

    assert draw() == draw(row_limits=[6, 6, 6])
    with pytest.raises(ValueError, match="one token limit >= 1 per prompt row"):
        draw(row_limits=[6, 0, 6])
    with pytest.raises(ValueError, match="role_max_new_tokens.plan must be an integer >= 1, got 0"):
        SamplingConfig(role_max_new_tokens={"plan": 0})


def test_same_seed_same_samples_other_seed_other_samples(tokenizer):
    model = tiny(tokenizer)

    def sample(seed):
        generate = BatchingGenerator({"p": (model, tokenizer)}, SamplingConfig(max_new_tokens=6), seed=seed)
        return [(g.response_ids, g.logprobs) for r in run_all(generate, [request(i) for i in range(4)]) for g in r]

    assert sample(7) == sample(7)
    assert sample(7) != sample(8)


def test_top_k_one_is_greedy_but_logprobs_stay_the_policys(tokenizer):
    model = tiny(tokenizer, seed=4)
    prompts = [tokenizer.encode(f"sum {i} and {i}", add_special_tokens=False) for i in range(4)]
    eos, pad = frozenset({tokenizer.eos_token_id}), tokenizer.pad_token_id

    def draw(**kw):
        config = SamplingConfig(max_new_tokens=5, temperature=0.7, **kw)
        return sample_batch(model, prompts, config, eos_ids=eos, pad_id=pad, generator=torch.Generator().manual_seed(0))

    greedy, top_k, top_p = draw(greedy=True), draw(top_k=1), draw(top_p=1e-6)
    assert [s.response_ids for s in top_k] == [s.response_ids for s in greedy] == [s.response_ids for s in top_p]
    # Truncation restricts the draw; the recorded log-prob is the untruncated policy's, not log(1) = 0.
    assert [s.logprobs for s in top_k] == [s.logprobs for s in greedy]
    assert all(lp < -0.1 for s in top_k for lp in s.logprobs)


def test_sampling_restores_training_mode(tokenizer):
    model = tiny(tokenizer).train()
    run_all(BatchingGenerator({"p": (model, tokenizer)}, SamplingConfig(max_new_tokens=2)), [request(0)])
    assert model.training


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"temperature": 0.0}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_bad_sampling_config_names_the_key(kwargs, key):
    with pytest.raises(ValueError, match=f"sampling.{key}"):
        SamplingConfig(**kwargs)


def test_restoring_the_rng_state_replays_the_same_samples(tokenizer):
    generate = BatchingGenerator({"p": (tiny(tokenizer), tokenizer)}, SamplingConfig(max_new_tokens=6), seed=3)
    state = generate.rng_state()
    first = run_all(generate, [request(i) for i in range(3)])
    second = run_all(generate, [request(i) for i in range(3)])
    generate.set_rng_state(state)
    assert run_all(generate, [request(i) for i in range(3)]) == first != second


def test_blocking_env_steps_do_not_change_what_is_sampled(tokenizer):
    """Episodes whose steps finish in threads in a timing-dependent order still get the same samples for the same
    seed: a batch waits for the steps in flight and is served in the rollout's order, not in arrival order."""

    def factory(task: Task) -> BlockingCounterEnv:
        # a while that only thread timing decides, so episodes reach their next request in an order that changes
        env = BlockingCounterEnv(lambda: time.sleep(os.urandom(1)[0] / 255 * 0.004), max_turns=3)
        env.reset(task)
        return env

    tasks = [Task(f"t{i}", "counter", i) for i in range(6)]
    router = PolicyRouter.from_spec("shared", ("a", "b"))
    model = tiny(tokenizer)

    def rollout_texts() -> list[tuple[str, int, str, int, str]]:
        generator = BatchingGenerator({"shared": (model, tokenizer)}, SamplingConfig(max_new_tokens=4), seed=5)
        results = asyncio.run(rollout_tasks(tasks, generator, router, RolloutConfig(k=3), factory))
        return [(s.task_uid, s.turn, s.role, s.branch, s.text) for r in results for s in r.samples]

    first = rollout_texts()
    assert len(first) == 6 * 3 * 2 * 3  # every episode plays all its turns: random text is never the target
    for _ in range(3):
        assert rollout_texts() == first
