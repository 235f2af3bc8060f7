"""Rollout throughput of BatchingGenerator (concurrent asyncio requests) against one direct sample_batch call."""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from verl_mas.local.generator import BatchingGenerator, SamplingConfig, eos_token_ids, sample_batch
from verl_mas.local.model import build_tiny_model
from verl_mas.local.tokenizer import train_tokenizer
from verl_mas.rollout import GenerationRequest

RESULTS = Path(__file__).parent / "results" / "generator.json"
CORPUS = [f"the sum of {a} and {b} is {a + b}. move up, then left, then down!" for a in range(40) for b in range(40)]


def make_requests(count: int, n: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            request_id=f"task{i}/solver",
            policy="solver",
            role="solver",
            messages=(
                {"role": "system", "content": "You add numbers."},
                {"role": "user", "content": f"What is the sum of {i} and {3 * i + 1}? " + "move up " * (i % 6)},
            ),
            n=n,
        )
        for i in range(count)
    ]


def timed(fn: Callable[[], list]) -> tuple[float, list]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def run_generator(generator: BatchingGenerator, requests: list[GenerationRequest]) -> list:
    async def fan_out():
        return await asyncio.gather(*(generator(r) for r in requests))

    return [g for gens in asyncio.run(fan_out()) for g in gens]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 keeps torch's default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    tokenizer = train_tokenizer(CORPUS, vocab_size=512)
    model = build_tiny_model(
        len(tokenizer), hidden=args.hidden, layers=args.layers, heads=4, seed=0, eos_token_id=tokenizer.eos_token_id
    )
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens)
    requests = make_requests(args.requests, args.n)
    eos_ids, pad_id = eos_token_ids(model, tokenizer), tokenizer.pad_token_id

    # The same rows the generator builds: each request's rendered prompt, n times, in request order.
    rows = []
    for r in requests:
        text = tokenizer.apply_chat_template(list(r.messages), add_generation_prompt=True, tokenize=False)
        rows.extend([tokenizer.encode(text, add_special_tokens=False)] * r.n)

    def direct(seed: int) -> list:
        rng = torch.Generator().manual_seed(seed)
        return sample_batch(model, rows, sampling, eos_ids=eos_ids, pad_id=pad_id, generator=rng)

    direct(0), run_generator(BatchingGenerator({"solver": (model, tokenizer)}, sampling), requests)  # warm up
    runs = []  # per seed: tokens, generator seconds, direct seconds (both paths produce the same tokens)
    for seed in range(args.repeats):
        generator = BatchingGenerator({"solver": (model, tokenizer)}, sampling, seed=seed)
        run_gen, run_direct = partial(run_generator, generator, requests), partial(direct, seed)
        # Alternate which path runs first, so a burst of load from other processes does not favour one.
        if seed % 2:
            direct_s, sampled = timed(run_direct)
            gen_s, generations = timed(run_gen)
        else:
            gen_s, generations = timed(run_gen)
            direct_s, sampled = timed(run_direct)
        # Same seed, same rows: identical samples, so both sides did exactly the same work.
        if [g.response_ids for g in generations] != [s.response_ids for s in sampled]:
            raise RuntimeError("BatchingGenerator and direct sample_batch disagree for the same seed")
        if generator.stats.batched_calls != 1:
            raise RuntimeError(f"expected one batched call, got {generator.stats.batched_calls}")
        tokens = sum(len(g.response_ids) for g in generations)
        runs.append({"tokens": tokens, "generator_s": gen_s, "direct_s": direct_s})

    results = {
        name: {
            "median_tokens_per_s": statistics.median(r["tokens"] / r[key] for r in runs),
            "best_tokens_per_s": max(r["tokens"] / r[key] for r in runs),
            "median_s": statistics.median(r[key] for r in runs),
        }
        for name, key in (("BatchingGenerator", "generator_s"), ("direct sample_batch", "direct_s"))
    }
    # The ratio of each seed's paired runs cancels the work difference between seeds.
    ratio = statistics.median(r["direct_s"] / r["generator_s"] for r in runs)

    print(f"{'path':<22}{'median s':>10}{'tokens/s median':>17}{'tokens/s best':>15}")
    for name, r in results.items():
        print(f"{name:<22}{r['median_s']:>10.3f}{r['median_tokens_per_s']:>17.0f}{r['best_tokens_per_s']:>15.0f}")
    print(f"tokens per run: {[r['tokens'] for r in runs]}")
    print(f"throughput ratio generator / direct (median of paired runs): {ratio:.3f} (target >= 0.8)")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "setup": {
                    "requests": args.requests,
                    "n": args.n,
                    "max_new_tokens": args.max_new_tokens,
                    "hidden": args.hidden,
                    "layers": args.layers,
                    "vocab": len(tokenizer),
                    "repeats": args.repeats,
                    "torch_threads": torch.get_num_threads(),
                    "torch": torch.__version__,
                    "machine": platform.machine(),
                },
                "results": results,
                "runs": runs,
                "ratio": ratio,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
