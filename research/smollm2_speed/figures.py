"""The real model's speed on this CPU (research/smollm2_speed/README.md), from data/real_model.json as
benchmarks/bench_real_model.py writes it: every figure recomputed from the raw repeats."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from research.default_run.default_run import minutes, reading
from research.default_run.figures import change_text
from verl_mas.stats import markdown_table

DATA = Path(__file__).resolve().parent / "data"
RESULT_FILE = "real_model.json"
PRESET_FILES = {"preset": "preset_smollm2.json", "preset_math": "preset_smollm2_math.json"}  # time_preset.py
MAKE_RUN_BLOCK = "preset_math"  # `make run` is `verl-mas train preset=smollm2_math` (a test reads the Makefile)
MODEL = "smollm2-135m-instruct"
GOAL_S = 90.0  # the goal for one AT-GRPO step at the study's batch on 2 free cores


def result() -> dict:
    return json.loads((DATA / RESULT_FILE).read_text())


def cell(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def speed_table() -> str:
    found = result()
    generation, steps = found["generation"], found["step"]["steps"]
    local, vllm = generation["local_tokens_per_s"], generation["vllm_tokens_per_s"]

    def column(key: str) -> list[float]:
        return [step[key] for step in steps]

    share = [step["update_gflops"] / step["roofline_gflops"] for step in steps]
    lines = [
        ["part", "median (min-max)"],
        ["local sampler, tokens/s", cell(local)],
        ["vLLM-CPU offline `LLM.generate`, tokens/s", cell(vllm)],
        ["local / vLLM-CPU (medians)", f"{statistics.median(local) / statistics.median(vllm):.2f}"],
        ["AT-GRPO step, s", cell(column("time/step_s"))],
        ["rollout, s", cell(column("time/rollout_s"))],
        ["update, s", cell(column("time/update_s"))],
        ["update, GFLOP/s (estimate)", cell(column("update_gflops"))],
        ["float32 matmul roofline, GFLOP/s", cell(column("roofline_gflops"))],
        ["update / roofline", cell(share, 2)],
    ]
    samples = statistics.median(column("samples"))
    prompt = statistics.median(column("prompt_tokens_distinct"))
    response = statistics.median(column("response_tokens"))
    return markdown_table(lines) + (
        f"\n\n{found['date']}, {len(local)} alternating repeats, torch threads {found['torch_threads']}. Generation: "
        f"{generation['rows']} first-turn prompts of {generation['prompt_tokens_mean']:.0f} tokens on average, "
        f"{generation['new_tokens']} new tokens each. Step: the `smollm2` preset untuned, {samples:.0f} samples "
        f"({prompt:.0f} distinct prompt tokens, {response:.0f} response tokens)."
    )


def headline() -> str:
    found = result()
    generation, steps = found["generation"], found["step"]["steps"]
    ratio = statistics.median(generation["local_tokens_per_s"]) / statistics.median(generation["vllm_tokens_per_s"])
    step = statistics.median(step["time/step_s"] for step in steps)
    share = statistics.median(step["update_gflops"] / step["roofline_gflops"] for step in steps)
    return (
        f"one step {step:.1f} s (goal {GOAL_S:.0f} s); local sampler {ratio:.2f}x vLLM-CPU's tokens/s; update at "
        f"{share:.2f} of the float32 matmul roofline ({found['date']}, {len(steps)} repeats)"
    )


def preset_table(file_name: str) -> str:
    """A preset end to end (benchmarks/time_preset.py): the conversion, then the training command by part."""
    path = DATA / file_name
    if not path.exists():
        return "Not timed yet."
    found = json.loads(path.read_text())
    total = found["conversion_s"] + found["train_s"]
    lines = [
        ["part", "wall, min"],
        [f"`verl-mas model {MODEL}` into an empty cache (the conversion)", f"{found['conversion_s'] / 60:.1f}"],
        [f"`{found['train_command']}`", f"{found['train_s'] / 60:.1f}"],
        ["- loading (and the format tune, where the preset has one)", f"{found['load_and_tune_s'] / 60:.1f}"],
        [f"- {found['evaluations']} evaluations (greedy and sampled)", f"{found['evaluation_s'] / 60:.1f}"],
        [f"- {found['rl_steps']} AT-GRPO steps (median {found['step_s_median']:.1f} s)", f"{found['rl_s'] / 60:.1f}"],
        ["both commands", f"{total / 60:.1f}"],
    ]
    return markdown_table(lines) + (
        f"\n\n{found['date']}, one run on {found['cpus']} cores (`{found['command']}`). Held-out greedy success "
        f"{found['greedy'][0]:.3f} -> {found['greedy'][1]:.3f}, sampled {found['sampled'][0]:.3f} -> "
        f"{found['sampled'][1]:.3f} (one seed: a check that it runs; learning claims rest on the studies' seeds)."
    )


def make_run_line() -> str:
    """`make run` (the smollm2_math preset, timed from an empty cache) as docs/results.md quotes it: before -> after,
    the wall time with the conversion, and the greedy change as the tiny default's record words it (an interval
    that treats the two readings of the same problems as independent, so it overstates the noise)."""
    found = json.loads((DATA / PRESET_FILES[MAKE_RUN_BLOCK]).read_text())
    (greedy_before, greedy_after), (sampled_before, sampled_after) = found["greedy"], found["sampled"]
    config = found["config"]
    problems = config["eval_tasks"]
    greedy = {"greedy": {"before": reading(greedy_before, problems), "after": reading(greedy_after, problems)}}
    return (
        f"**greedy {greedy_before:.3f} -> {greedy_after:.3f}, sampled {sampled_before:.3f} -> {sampled_after:.3f}** "
        f"in {minutes(found['conversion_s'] + found['train_s'])}, the conversion included ({found['date']}); greedy "
        f"change {change_text(greedy, 'greedy')} problems, seed {config['seed']} "
        "(one run; the two readings treated as independent, which overstates the noise)"
    )


def tables() -> dict[str, str]:
    return {"speed": speed_table(), "headline": headline(), "make_run": make_run_line()} | {
        block: preset_table(file_name) for block, file_name in PRESET_FILES.items()
    }
