"""The routing LLM client: each role's generation requests go to the servers of that role's policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from verl_mas.router import PolicyRouter


class GenerateClient(Protocol):
    """What verl's `LLMServerClient` offers an agent loop: token-in, token-out generation with sticky sessions."""

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs):
        """Returns verl's TokenOutput (token_ids, log_probs, extra_fields, ...)."""


class PolicyRoutingClient:
    """One verl LLM client per policy; `generate(..., role=...)` picks the client of the role's policy.

    A shared policy is the special case of one client (one server group) serving every role.
    Picklable as long as the per-policy clients are (verl's hold only config and a Ray handle), so it can be
    handed to verl's agent-loop workers in place of the single `LLMServerClient`.
    """

    def __init__(
        self, clients: Mapping[str, GenerateClient], router: PolicyRouter, adapters: Mapping[str, str] | None = None
    ) -> None:
        """Check at start-up that every role's policy has a client and every client serves a role.

        `adapters` (policy -> LoRA adapter name): every policy's requests name their adapter (`generate(...,
        adapter=...)`), for a server that serves one adapter per policy on one base model (`mas.lora_per_role`).

        Raises:
            ValueError: naming the role without a served policy and the policies that are served, or the
                served policy no role uses.
        """
        served = list(clients)
        if not served:
            raise ValueError("routing: no policy servers given")
        for role in router.roles:
            policy = router.policy_of(role)
            if policy not in clients:
                raise ValueError(
                    f"routing: role {role!r} maps to policy {policy!r}, which has no server; served policies: {served}"
                )
        idle = [policy for policy in served if policy not in router.policies]
        if idle:
            raise ValueError(f"routing: policy server(s) {idle} serve no role; roles use {list(router.policies)}")
        if adapters is not None and sorted(adapters) != sorted(router.policies):
            raise ValueError(f"routing: adapters are given for {sorted(adapters)}; roles use {list(router.policies)}")
        self.clients = dict(clients)
        self.router = router
        self.adapters = dict(adapters) if adapters is not None else None

    def client_of(self, role: str) -> GenerateClient:
        """The client that serves `role` (KeyError naming the role and the known roles if unknown)."""
        return self.clients[self.router.policy_of(role)]

    async def generate(
        self, request_id: str, *, role: str, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs
    ):
        """Forward one generation to `role`'s policy, reusing `request_id` so its turns stick to one server; with
        adapters, the request names its policy's adapter."""
        if self.adapters is not None:
            kwargs["adapter"] = self.adapters[self.router.policy_of(role)]
        return await self.client_of(role).generate(
            request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs
        )
