"""Checkpoints of the local engine: model weights, trainer (optimizer + shuffle generator) states, step, RNG states."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verl_mas.local.files import load_tensors, read_json
from verl_mas.local.update import PolicyTrainer

_STEP_DIR = re.compile(r"^step_(\d+)$")
_META_FILE = "meta.json"  # written last inside the tmp dir: a step_* dir without it is not a checkpoint
_META_KEYS = frozenset({"step", "models", "trainers", "extra"})


@dataclass(frozen=True)
class LoadedCheckpoint:
    """What `load_checkpoint` restored besides the objects it filled in place."""

    path: Path
    step: int
    extra: dict[str, Any]


def save_checkpoint(
    root: str | Path,
    step: int,
    models: Mapping[str, torch.nn.Module],
    trainers: Mapping[str, PolicyTrainer],
    extra: Mapping[str, Any] | None = None,
    write_files: Callable[[Path], None] | None = None,
) -> Path:
    """Write `root/step_{step:08d}` atomically: everything goes to a tmp dir that is renamed into place.

    Args:
        root: the checkpoint folder (created if missing).
        step: the training step this checkpoint follows.
        models: named models; a base model shared by LoRA trainers is listed once.
        trainers: named PolicyTrainers (optimizer state, shuffle generator, optimizer-step count).
        extra: JSON-serialisable caller state (e.g. a data cursor), returned by `load_checkpoint`.
        write_files: called with the unfinished directory to add the caller's own files (tokenizer, config,
            sampler states), so that they are part of the same atomic rename.

    Returns:
        The checkpoint directory.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:08d}"
    tmp = root / f".tmp_step_{step:08d}_{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    for name, model in models.items():
        torch.save(model.state_dict(), tmp / f"model_{_safe(name)}.pt")
    for name, trainer in trainers.items():
        torch.save(trainer.state_dict(), tmp / f"trainer_{_safe(name)}.pt")
    torch.save(_rng_state(), tmp / "rng.pt")
    if write_files is not None:
        write_files(tmp)
    meta = {"step": step, "models": sorted(models), "trainers": sorted(trainers), "extra": dict(extra or {})}
    (tmp / _META_FILE).write_text(json.dumps(meta, indent=2))
    if final.exists():  # re-saving a step: move the old one aside so the rename below cannot fail half-way
        stale = root / f".stale_step_{step:08d}_{os.getpid()}"
        final.rename(stale)
        shutil.rmtree(stale)
    tmp.rename(final)
    return final


def load_checkpoint(
    path: str | Path,
    models: Mapping[str, torch.nn.Module],
    trainers: Mapping[str, PolicyTrainer],
    explain: Callable[[], str] | None = None,
) -> LoadedCheckpoint:
    """Fill `models` and `trainers` (same names as saved) from a checkpoint dir and restore the global RNGs.

    Build the trainers before loading (their optimizers must exist to receive state); restoring the RNGs last
    means that nothing done while loading shifts the random streams the run continues with.

    `explain`, called only when what was saved does not fit what was built, says why in the caller's terms (the
    settings that changed since, e.g. `model.hidden: saved 32, now 48`); "" when it cannot tell.
    """
    path = Path(path)
    meta = _read_meta(path / _META_FILE)
    for kind, given in (("models", models), ("trainers", trainers)):
        if sorted(given) != meta[kind]:
            message = f"checkpoint {path} holds {kind} {meta[kind]}, this config builds {sorted(given)}"
            why = explain() if explain is not None else ""
            raise ValueError(f"{message} ({why})" if why else message)
    # Read every file before filling anything in: a bad file leaves the run as it was built.
    model_states = {name: load_tensors(path / f"model_{_safe(name)}.pt") for name in models}
    trainer_states = {name: load_tensors(path / f"trainer_{_safe(name)}.pt") for name in trainers}
    rng_state = load_tensors(path / "rng.pt")
    for name, model in models.items():
        _fill(path / f"model_{_safe(name)}.pt", model.load_state_dict, model_states[name], explain)
    for name, trainer in trainers.items():
        _fill(path / f"trainer_{_safe(name)}.pt", trainer.load_state_dict, trainer_states[name], explain)
    _fill(path / "rng.pt", _set_rng_state, rng_state)
    return LoadedCheckpoint(path=path, step=int(meta["step"]), extra=meta["extra"])


def _read_meta(file: Path) -> dict[str, Any]:
    meta = read_json(file)
    if not isinstance(meta, dict) or not _META_KEYS <= meta.keys():
        raise ValueError(f"{file} is not a checkpoint's meta file (a JSON object with {sorted(_META_KEYS)})")
    return meta


def _fill(file: Path, restore: Callable[[Any], object], state: Any, explain: Callable[[], str] | None = None) -> None:
    """Restore `state` read from `file`; one that does not fit what this config built is an error naming the file,
    and the settings that changed since it was saved when `explain` can tell (else the loader's first lines)."""
    try:
        restore(state)
    except (RuntimeError, KeyError, ValueError, TypeError, IndexError) as error:
        why = explain() if explain is not None else ""
        if why:
            message = f"{file} does not fit the run this config builds: {why}"
        else:
            details = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
            shown = "; ".join(details[:2]) or type(error).__name__
            message = f"{file} does not fit the run this config builds (changed model or router?): {shown}"
        raise ValueError(message) from error


def is_checkpoint(path: str | Path) -> bool:
    """Whether `path` is a complete checkpoint directory (a step_* dir whose meta.json was written)."""
    path = Path(path)
    return bool(_STEP_DIR.match(path.name)) and (path / _META_FILE).is_file()


def latest_checkpoint(root: str | Path) -> Path | None:
    """The complete checkpoint with the highest step under `root`, or None (tmp and unfinished dirs are skipped)."""
    root = Path(root)
    if not root.is_dir():
        return None
    complete = [(int(_STEP_DIR.match(child.name).group(1)), child) for child in root.iterdir() if is_checkpoint(child)]
    return max(complete)[1] if complete else None


def _safe(name: str) -> str:
    """A file-name-safe rendering of a model or policy name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _rng_state() -> dict[str, Any]:
    # numpy's key array travels as a tensor so that the file loads with weights_only=True.
    bit_generator, key, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (bit_generator, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, cached_gaussian),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    bit_generator, key, pos, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((bit_generator, key.numpy().astype(np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
