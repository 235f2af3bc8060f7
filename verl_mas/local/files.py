"""Reading and writing a run's files: errors that name the file, atomic writes, and output paths checked up front."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

from verl_mas.data_files import UnreadableFile


class RunError(RuntimeError):
    """A run that cannot go on for a reason the user can act on (the CLI prints it as one paragraph)."""


def read_json(path: Path) -> Any:
    """The JSON value in `path`."""
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UnreadableFile(f"{path} is not valid JSON ({_what_is_wrong(text, error)})") from error


def load_tensors(path: Path) -> Any:
    """What `torch.save` wrote to `path` (weights only: a checkpoint never runs code when loaded)."""
    import torch  # here: the CLI imports this module for RunError, and torch is slow to import

    if not path.is_file():
        raise UnreadableFile(f"{path} is missing")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile) as error:
        size = path.stat().st_size
        state = "empty" if size == 0 else f"{size} bytes, truncated or not a torch file"
        raise UnreadableFile(f"{path} cannot be loaded ({state}): {_first_line(error)}") from error


def check_writable_dir(path: Path, key: str) -> None:
    """`path` is, or can be created as, a folder this process may write to; checked before any work starts."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"{key} {path} exists and is not a folder")
    existing = _nearest_existing(path)
    if not existing.is_dir():
        raise ValueError(f"{key} {path} cannot be created: {existing} is not a folder")
    if not _may_write(existing):
        raise ValueError(f"{key} {path} is not writable ({existing} is read-only)")


def check_writable_file(path: Path, key: str) -> None:
    """`path` is, or can be created as, a file this process may write to."""
    if path.is_dir():
        raise ValueError(f"{key} {path} is a folder; give a file path")
    if path.exists():
        if not _may_write(path) or not _may_write(path.parent):
            raise ValueError(f"{key} {path} is not writable")
        return
    check_writable_dir(path.parent, f"{key}'s folder")


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def _may_write(path: Path) -> bool:
    # os.access alone says yes to root on a read-only mount; statvfs tells the mount's flag.
    read_only_mount = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    return os.access(path, os.W_OK) and not read_only_mount and not _is_pseudo_fs(path)


def _is_pseudo_fs(path: Path) -> bool:
    """/proc and /sys take no new files, whatever their permission bits say."""
    return path.resolve().parts[1:2] in (("proc",), ("sys",))


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise UnreadableFile(f"{path} is missing")
    try:
        return path.read_text()
    except UnicodeDecodeError as error:
        raise UnreadableFile(f"{path} is not text (byte {error.start} is not UTF-8)") from error


def _what_is_wrong(text: str, error: json.JSONDecodeError) -> str:
    return "empty" if not text.strip() else f"{error.msg} at line {error.lineno} column {error.colno}"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
