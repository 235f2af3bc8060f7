"""A trainer hook for the CPU-stack test: makes verl's server serve each role the other role's adapter for one step,
while the actor keeps the right ones, so that the on-policy guard must stop the run. The test copies this file into
the launch's folder, the driver's working directory, which Ray puts on its workers' import path."""

from __future__ import annotations

import ray
import torch

from verl_mas.verl_engine.adapters import adapter_parameters, local
from verl_mas.verl_engine.hooks import TrainerHook


def swap_adapters_in_worker(actor, first: str, second: str) -> None:
    """Inside one actor worker (run through Ray's `__ray_call__`): exchange the weights of two role adapters."""
    worker = next(iter(actor.worker_dict.values()))  # verl's colocated class holds the policy worker by role
    model = worker._peft_model()
    ones, others = adapter_parameters(model, [first]), adapter_parameters(model, [second])
    assert ones and len(ones) == len(others), (len(ones), len(others))
    with torch.no_grad():
        for one, other in zip(ones, others, strict=True):
            one, other = local(one), local(other)
            held = one.clone()
            one.copy_(other)
            other.copy_(held)


class ServeSwappedAdapters(TrainerHook):
    """After `step`'s update the actor's two role adapters are exchanged, so that verl's weight sync ships each role's
    adapter under the other role's name; before step + 1's old log-probs they are exchanged back. Step + 1's
    rollouts were then served with the wrong adapter for every role, and the actor recomputes under the right one."""

    def __init__(self, step: int, adapters: list[str]):
        self.step = step
        self.adapters = tuple(adapters)

    def _swap(self, trainer) -> None:
        groups = {id(runtime.actor_rollout_wg): runtime.actor_rollout_wg for runtime in trainer.policies.values()}
        calls = [
            worker.__ray_call__.remote(swap_adapters_in_worker, *self.adapters)
            for group in groups.values()
            for worker in group.workers
        ]
        ray.get(calls)

    def after_update(self, trainer, parts) -> None:
        if trainer.global_steps == self.step:
            self._swap(trainer)

    def before_log_probs(self, trainer, parts) -> None:
        if trainer.global_steps == self.step + 1:
            self._swap(trainer)
