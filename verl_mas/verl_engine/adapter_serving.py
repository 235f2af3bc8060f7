"""Serving one LoRA adapter per role from one vLLM server (`mas.lora_per_role`): the adapters' vLLM ids, the server
that answers each request with the adapter the request names, and its vLLM workers' extension that loads a synced
adapter under its own name.

Kept apart from `adapters.py` (the actor side): vLLM's worker processes import the extension by name, and this module
imports nothing of verl's trainer.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from verl.utils.vllm import TensorLoRARequest
from verl.workers.rollout.vllm_rollout.utils import VLLM_LORA_INT_ID, vLLMColocateWorkerExtension
from vllm.lora.request import LoRARequest

# keys the actor worker adds to the peft config it ships with an adapter, read (and removed) by the vLLM worker
ADAPTER_NAME_FIELD = "mas_adapter"
ADAPTER_ID_FIELD = "mas_adapter_id"
_FIRST_ID = 1000  # vLLM LoRA ids of the adapters: 1000, 1001, ... (verl's own single adapter is VLLM_LORA_INT_ID)
# the adapter the request being served names, read by the engine client when verl's generate calls the engine
_REQUEST_ADAPTER: contextvars.ContextVar[str | None] = contextvars.ContextVar("mas_request_adapter", default=None)


def adapter_ids(names: Sequence[str]) -> dict[str, int]:
    """Each adapter's vLLM LoRA id, in the order given."""
    ids = {name: _FIRST_ID + i for i, name in enumerate(names)}
    if len(ids) != len(names) or VLLM_LORA_INT_ID in ids.values():
        raise ValueError(f"adapters {list(names)}: names must be distinct")
    return ids


def adapter_path(name: str) -> str:
    """The `lora_path` vLLM keys an adapter's request by; nothing is read from it (the weights come by sync)."""
    return f"mas_adapter/{name}"


def adapter_request(name: str, ids: Mapping[str, int]) -> LoRARequest:
    return LoRARequest(lora_name=name, lora_int_id=ids[name], lora_path=adapter_path(name))


@contextlib.contextmanager
def serving(adapter: str) -> Iterator[None]:
    """The request being served names `adapter` (module-level: Ray pickles the server class by value, not the
    context variable)."""
    token = _REQUEST_ADAPTER.set(adapter)
    try:
        yield
    finally:
        _REQUEST_ADAPTER.reset(token)


def served_adapter() -> str | None:
    return _REQUEST_ADAPTER.get()


class AdapterEngineClient:
    """vLLM's engine client as verl's server holds it, except that `generate` serves the adapter the current request
    named (verl's server passes its single fixed adapter, or none before it is synced)."""

    def __init__(self, engine: Any, ids: Mapping[str, int]) -> None:
        self._engine = engine
        self._ids = dict(ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, *args: Any, lora_request: LoRARequest | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        adapter = served_adapter()
        if adapter is None:
            raise RuntimeError("a generation reached the adapter server without an adapter: it would serve the base")
        return self._engine.generate(*args, lora_request=adapter_request(adapter, self._ids), **kwargs)


def adapter_server_class(server_class: type, names: Sequence[str]) -> type:
    """`server_class` (verl's vLLM HTTP server, or a subclass) serving `names`' adapters: vLLM holds all of them
    (`max_loras`), its workers load each synced adapter under its own id (`AdapterWorkerExtension`), and each
    `generate(..., adapter=name)` is served with that adapter; a request without a known adapter is refused."""
    ids = adapter_ids(names)

    class AdapterVllmHttpServer(server_class):
        def _get_worker_extension_cls(self) -> str:
            return f"{AdapterWorkerExtension.__module__}.{AdapterWorkerExtension.__qualname__}"

        async def run_server(self, args: Any) -> None:
            # verl asks for one adapter slot; every role's adapter is resident, and verl's own (synced, never served)
            args.max_loras = len(ids) + 1
            await super().run_server(args)
            self.engine = AdapterEngineClient(self.engine, ids)

        async def generate(self, *args: Any, adapter: str | None = None, **kwargs: Any) -> Any:
            if adapter not in ids:
                raise ValueError(f"adapter server: request names adapter {adapter!r}; it serves {list(ids)}")
            with serving(adapter):
                return await super().generate(*args, **kwargs)

    return AdapterVllmHttpServer


class AdapterWorkerExtension(vLLMColocateWorkerExtension):
    """verl's vLLM worker extension that loads an adapter the actor shipped with its name (`ADAPTER_NAME_FIELD` in
    its peft config) under that name's id, replacing the adapter's previous weights; verl's own syncs are unchanged."""

    def _update_weights(self, weights: list[tuple[str, Any]], peft_config: dict, base_sync_done: bool) -> None:
        if not (peft_config and base_sync_done and ADAPTER_NAME_FIELD in peft_config):
            return super()._update_weights(weights, peft_config=peft_config, base_sync_done=base_sync_done)
        config = dict(peft_config)
        name, lora_id = config.pop(ADAPTER_NAME_FIELD), int(config.pop(ADAPTER_ID_FIELD))
        tensors = {key: tensor.clone() for key, tensor in weights}  # out of the receiver's reused buffer
        self.remove_lora(lora_id)  # vLLM keeps a loaded id's old weights when it is added again
        self.add_lora(
            TensorLoRARequest(
                lora_name=name,
                lora_int_id=lora_id,
                lora_path=adapter_path(name),
                peft_config=config,
                lora_tensors=tensors,
            )
        )
        return None
