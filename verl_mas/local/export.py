"""Writes local-engine policies as Hugging Face model directories (weights, config, tokenizer and chat template),
so that the verl engine, vLLM or any HF loader can start from a warm start or a checkpoint of the local engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from verl_mas.local.config import LocalTrainConfig
from verl_mas.local.train import LocalRun, find_checkpoint


def export_policies(
    config: LocalTrainConfig, out_dir: str | Path, checkpoint: str | Path | None = None, log: Callable = print
) -> dict[str, Path]:
    """Build `config`'s run (its warm start, or `checkpoint`'s weights) and save each policy's model.

    One policy is written to `out_dir` itself; several go to `out_dir/<policy>`.

    Raises:
        ValueError: the run trains LoRA adapters (they are not whole models), or `out_dir` holds files already.
    """
    if config.lora.rank:
        raise ValueError("export: lora.rank > 0 trains adapters on one base model; export whole models (lora.rank=0)")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"export: {out} is not empty; choose a new directory")
    found = find_checkpoint(checkpoint) if checkpoint is not None else None
    run = LocalRun(config, log, found)
    if found is not None:
        run.load(found)
    folders = {}
    for policy, model in run.models.items():
        folder = out if len(run.models) == 1 else out / policy
        model.save_pretrained(str(folder))
        run.tokenizer.save_pretrained(str(folder))
        folders[policy] = folder
        log(f"export: policy {policy} -> {folder}")
    return folders
