"""What each policy's runtime is built with: its worker group's role (with or without the reference model), and the
one tokenizer every policy must share."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import Role

from verl_mas.verl_engine import policies
from verl_mas.verl_engine.config import MasConfigError
from verl_mas.verl_engine.policies import actor_role, check_shared_tokenizer, ref_in_actor


def policy_config(kl_loss: bool, **model):
    return OmegaConf.create(
        {
            "algorithm": {"use_kl_in_reward": False},
            "actor_rollout_ref": {"actor": {"use_kl_loss": kl_loss}, "model": {"path": "/models/p", **model}},
        }
    )


@pytest.mark.parametrize(
    "kl_loss, model, in_actor, role",
    [
        (False, {}, False, Role.ActorRollout),  # no KL: no reference at all
        (True, {}, False, Role.ActorRolloutRef),  # a whole model: its reference is a model of its own
        (True, {"lora_rank": 8}, True, Role.ActorRollout),  # LoRA: the reference is the base, adapter off
        (True, {"lora_rank": 0, "lora_adapter_path": "/a"}, True, Role.ActorRollout),  # a loaded adapter too
        (False, {"lora_rank": 8}, True, Role.ActorRollout),
    ],
)
def test_the_worker_group_holds_the_reference_only_where_the_actor_cannot(kl_loss, model, in_actor, role):
    config = policy_config(kl_loss, **model)
    assert ref_in_actor(config) is in_actor
    assert actor_role(config) == role


class Tokenizer:
    def __init__(self, vocab: dict, chat_template: str):
        self.vocab, self.chat_template = vocab, chat_template

    def get_vocab(self) -> dict:
        return self.vocab


def test_a_policy_whose_tokenizer_differs_is_refused_naming_its_model(monkeypatch):
    own = Tokenizer({"a": 0, "b": 1}, "{{ messages }}")
    monkeypatch.setattr(policies, "omega_conf_to_dataclass", lambda model: SimpleNamespace(tokenizer=own))
    check_shared_tokenizer("plan", policy_config(False), Tokenizer({"a": 0, "b": 1}, "{{ messages }}"))
    for shared in (Tokenizer({"a": 0, "b": 2}, "{{ messages }}"), Tokenizer({"a": 0, "b": 1}, "{{ other }}")):
        with pytest.raises(MasConfigError, match=r"^mas\.policies\.plan\.model_path='/models/p': its tokenizer"):
            check_shared_tokenizer("plan", policy_config(False), shared)
