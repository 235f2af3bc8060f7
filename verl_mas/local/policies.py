"""A local run's policies: whole models (tiny or loaded) or one base with LoRA adapters, warm-started, with trainers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from peft import LoraConfig, get_peft_model

from verl_mas.local.config import LocalTrainConfig, resolved_warm_start
from verl_mas.local.generator import PolicyModel
from verl_mas.local.model import build_tiny_model, load_model
from verl_mas.local.update import PolicyTrainer, UpdateConfig
from verl_mas.local.warm_start import ExpertPair, warm_start

LORA_BASE_MODEL = "base"  # the checkpoint name of the one model that carries every policy's adapter


@dataclass
class Policies:
    """What a run trains: its models by checkpoint name, and per policy the trainer and the model that samples."""

    models: dict[str, torch.nn.Module]
    trainers: dict[str, PolicyTrainer]
    served: dict[str, PolicyModel]


def resolve_device(name: str) -> torch.device:
    """The torch device of `LocalTrainConfig.device`; asking for cuda on a machine without one is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} but torch sees no CUDA device here; use device=cpu or device=auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device={name!r} but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return device


def build_policies(
    config: LocalTrainConfig,
    policies: Sequence[str],
    tokenizer,
    pairs: list[ExpertPair],
    device: torch.device,
    log: Callable[[str], None],
) -> Policies:
    """One whole model per policy, or with `lora.rank` one base model with an adapter per policy; each model
    warm-started on the expert moves of the roles it serves (none: no warm start)."""
    builder = _PolicyBuilder(config, tokenizer, device, log)
    return builder.adapters(policies, pairs) if config.lora.rank else builder.whole_models(policies, pairs)


class _PolicyBuilder:
    def __init__(self, config: LocalTrainConfig, tokenizer, device: torch.device, log: Callable[[str], None]) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.device = device
        self.log = log

    def whole_models(self, policies: Sequence[str], pairs: list[ExpertPair]) -> Policies:
        """One whole model per policy, each warm-started on its own roles' expert moves."""
        built = Policies({}, {}, {})
        for index, policy in enumerate(policies):
            model = self._model(index)
            self._warm_start(policy, model, [p for p in pairs if p.policy == policy])
            built.models[policy] = model
            built.trainers[policy] = PolicyTrainer(model, self._update_config(policy))
            built.served[policy] = PolicyModel(model, self.tokenizer)
        return built

    def adapters(self, policies: Sequence[str], pairs: list[ExpertPair]) -> Policies:
        """One base model, warm-started on every expert move, carrying one LoRA adapter per policy."""
        base = self._model(0)
        self._warm_start(LORA_BASE_MODEL, base, pairs)
        spec = self.config.lora
        lora = LoraConfig(
            r=spec.rank,
            lora_alpha=spec.alpha,
            target_modules=list(spec.target_modules),
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
        )
        with torch.random.fork_rng(devices=[]):  # adapter init draws from its own seeded stream
            torch.manual_seed(self.config.seed)
            model = get_peft_model(base, lora, adapter_name=policies[0])
            for policy in policies[1:]:
                model.add_adapter(policy, lora)
        trainers = {
            policy: PolicyTrainer(model, self._update_config(policy), adapter_name=policy) for policy in policies
        }
        served = {policy: PolicyModel(model, self.tokenizer, adapter=policy) for policy in policies}
        return Policies({LORA_BASE_MODEL: model}, trainers, served)

    def _model(self, index: int) -> torch.nn.Module:
        spec = self.config.model
        if spec.path:
            return load_model(spec.path, device=self.device)
        return build_tiny_model(
            vocab_size=len(self.tokenizer),
            hidden=spec.hidden,
            layers=spec.layers,
            heads=spec.heads,
            max_positions=spec.max_positions,
            seed=self.config.seed + index,
            pad_token_id=self.tokenizer.pad_token_id,
            bos_token_id=self.tokenizer.bos_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
        ).to(self.device)

    def _warm_start(self, name: str, model: torch.nn.Module, pairs: list[ExpertPair]) -> None:
        if pairs:
            examples = [(pair.messages, pair.move) for pair in pairs]
            config = resolved_warm_start(self.config)
            self.log(f"warm start {name}: {len(pairs)} expert moves, {config.epochs} epoch(s) at lr {config.lr:g}")
            loss = warm_start(
                model, self.tokenizer, examples, config, self.config.seed,
                log=lambda line: self.log(f"warm start {name}: {line}"),
            )  # fmt: skip
            self.log(f"warm start {name}: {len(pairs)} expert moves, final loss {loss:.3f}")

    def _update_config(self, policy: str) -> UpdateConfig:
        lr = self.config.policy_lr.get(policy, self.config.update.lr)
        return dataclasses.replace(self.config.update, lr=lr)
