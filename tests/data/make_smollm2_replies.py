"""Makes smollm2_zero_shot_replies.jsonl: SmolLM2-135M-Instruct's own zero-shot replies in every environment.

The data was made, from the repository root, with:

    .venv/bin/python tests/data/make_smollm2_replies.py tests/data/smollm2_zero_shot_replies.jsonl

For every environment and every option variant that changes its prompts, three tasks of the train split (seed 0)
play their first turn: each role's prompt is rendered through the model's chat template and one reply is sampled
(temperature 1.0, no truncation, a torch generator seeded per variant and role), then stepped in the environment in
the workflow's order (puzzles: the tool, then the plan agent seeing the tool's proposal; math and code: both roles
on the turn's state, the first role's move pending). Replies are capped at 96 new tokens, 160 where the role is
asked for a program or test cases (a puzzle's code-mode tool, math's tool, code's coder and tester).

Each line is one step: env, options, split, seed, task (index), step (order within the episode), turn, role, reply,
and what the environment gave it when recorded (team_reward, local_reward, valid, done, error).
`tests/envs/test_model_replies.py` replays every episode and checks the same scores come back.
"""

from __future__ import annotations

import json
import sys
import zlib

import torch
from transformers import AutoModelForCausalLM

from verl_mas.dataset import split_tasks
from verl_mas.env import make_env
from verl_mas.local.generator import SamplingConfig, eos_token_ids, sample_batch
from verl_mas.local.tokenizer import load_tokenizer, render_prompt
from verl_mas.pretrained import prepared_path

MODEL = "smollm2-135m-instruct"
SPLIT, SEED, TASKS = "train", 0, 3
SHORT, LONG = 96, 160

PUZZLE_VARIANTS = [
    {},
    {"tool_mode": "compact"},
    {"brief_prompts": True},
    {"tool_mode": "compact", "brief_prompts": True},
    {"single_agent": True},
    {"single_agent": True, "brief_prompts": True},
]
VARIANTS: dict[str, list[dict]] = {
    "plan_path": PUZZLE_VARIANTS,
    "sokoban": PUZZLE_VARIANTS,
    "sudoku": PUZZLE_VARIANTS,
    "math": [{}, {"brief_prompts": True}, {"single_agent": True}, {"single_agent": True, "brief_prompts": True}],
    "code": [
        {},
        {"brief_prompts": True},
        {"brief_prompts": True, "brief_examples": True},
        {"single_agent": True},
        {"source": "humaneval"},  # function-style tasks: the tester writes assert lines
    ],
}


def max_new_tokens(env_name: str, options: dict, role: str) -> int:
    if env_name == "code" or (env_name == "math" and role == "tool"):
        return LONG
    if role == "tool" and options.get("tool_mode", "code") == "code":
        return LONG
    return SHORT


def main(path: str) -> None:
    torch.set_num_threads(1)  # the machine is shared: one thread runs faster than two contended ones
    tokenizer = load_tokenizer(MODEL)
    model = AutoModelForCausalLM.from_pretrained(prepared_path(MODEL), dtype=torch.float32)
    model.eval()
    eos = eos_token_ids(model, tokenizer)
    lines = []
    for env_name, variants in VARIANTS.items():
        for options in variants:
            tasks = split_tasks(env_name, SPLIT, TASKS, SEED, options)
            envs = [make_env(env_name, **options) for _ in tasks]
            for env, task in zip(envs, tasks, strict=True):
                env.reset(task)
            for step, role in enumerate(envs[0].workflow().roles):
                key = f"{env_name}/{json.dumps(options, sort_keys=True)}/{role}"
                prompts = [render_prompt(tokenizer, env.observe(role)) for env in envs]
                config = SamplingConfig(temperature=1.0, max_new_tokens=max_new_tokens(env_name, options, role))
                generator = torch.Generator().manual_seed(zlib.crc32(key.encode()))
                with torch.no_grad():
                    out = sample_batch(
                        model, prompts, config, eos_ids=eos, pad_id=tokenizer.pad_token_id, generator=generator
                    )
                for index, (env, sampled) in enumerate(zip(envs, out, strict=True)):
                    reply = tokenizer.decode(list(sampled.response_ids), skip_special_tokens=True)
                    turn = env.state.turn
                    result = env.step(role, reply)
                    record = {
                        "env": env_name,
                        "options": options,
                        "split": SPLIT,
                        "seed": SEED,
                        "task": index,
                        "step": step,
                        "turn": turn,
                        "role": role,
                        "reply": reply,
                        "team_reward": result.team_reward,
                        "local_reward": result.local_reward,
                        "valid": result.valid,
                        "done": result.done,
                        "error": result.info.get("error"),
                    }
                    lines.append(json.dumps(record, ensure_ascii=False))
                    print(key, index, result.local_reward, result.valid, repr(reply[:80]), flush=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
