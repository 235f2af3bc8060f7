"""The routing client: each role reaches its policy's server; a role without a served policy fails at start."""

from __future__ import annotations

import pickle

import pytest

from verl_fakes import FakeServerManager, ScriptedServer, tiny_tokenizer
from verl_mas.router import PolicyRouter
from verl_mas.verl_engine.policies import PolicyRuntime
from verl_mas.verl_engine.routing import PolicyRoutingClient
from verl_mas.verl_engine.trainer import AtGrpoTrainer

ROLES = ("tool", "plan", "check")


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def server(tokenizer, reply):
    return ScriptedServer(tokenizer, lambda prompt, call: reply)


async def test_each_role_reaches_its_policy_server(tokenizer):
    router = PolicyRouter.from_spec({"tool": "coder", "plan": "planner", "check": "coder"}, ROLES)
    servers = {"coder": server(tokenizer, "c"), "planner": server(tokenizer, "p")}
    client = PolicyRoutingClient(servers, router)
    for role in ("plan", "tool", "check", "tool"):
        await client.generate(f"task/{role}", role=role, prompt_ids=[5, 6], sampling_params={"temperature": 1.0})
    assert [c.request_id for c in servers["coder"].calls] == ["task/tool", "task/check", "task/tool"]
    assert [c.request_id for c in servers["planner"].calls] == ["task/plan"]
    assert servers["planner"].calls[0].prompt_ids == [5, 6]
    with pytest.raises(KeyError, match="'critic' has no policy"):
        await client.generate("x", role="critic", prompt_ids=[1], sampling_params={})


async def test_shared_policy_is_one_server_group(tokenizer):
    shared = server(tokenizer, "s")
    client = PolicyRoutingClient({"shared": shared}, PolicyRouter.from_spec("shared", ROLES))
    for role in ROLES:
        await client.generate(f"t/{role}", role=role, prompt_ids=[1], sampling_params={})
    assert [c.request_id for c in shared.calls] == ["t/tool", "t/plan", "t/check"]


def test_role_without_served_policy_is_a_start_up_error(tokenizer):
    router = PolicyRouter.from_spec("per_role", ROLES)
    servers = {"tool": server(tokenizer, "a"), "plan": server(tokenizer, "b")}
    with pytest.raises(ValueError, match=r"role 'check' maps to policy 'check'.*served policies: \['tool', 'plan'\]"):
        PolicyRoutingClient(servers, router)
    with pytest.raises(ValueError, match=r"\['spare'\] serve no role"):
        PolicyRoutingClient({**servers, "check": server(tokenizer, "c"), "spare": server(tokenizer, "d")}, router)
    with pytest.raises(ValueError, match="no policy servers"):
        PolicyRoutingClient({}, router)


def test_client_pickles_for_ray_workers(tokenizer):
    router = PolicyRouter.from_spec("per_role", ("a", "b"))
    client = PolicyRoutingClient({"a": "client-a", "b": "client-b"}, router)
    copy = pickle.loads(pickle.dumps(client))
    assert copy.client_of("b") == "client-b" and copy.router == router


def test_trainer_hands_the_agent_loop_one_client_per_policy(tokenizer):
    trainer = AtGrpoTrainer.__new__(AtGrpoTrainer)  # only the routing wiring: no Ray, no GPUs
    trainer.router = PolicyRouter.from_spec("per_role", ("a", "b"))
    servers = {"a": server(tokenizer, "1"), "b": server(tokenizer, "2")}
    trainer.policies = {
        policy: PolicyRuntime(None, tokenizer, None, None, False, FakeServerManager(s), None)
        for policy, s in servers.items()
    }
    client = trainer.get_llm_client()
    assert client.client_of("a") is servers["a"] and client.client_of("b") is servers["b"]
    assert [runtime.llm_server_manager for runtime in trainer.policies.values()] == trainer._rollout_server_managers()
