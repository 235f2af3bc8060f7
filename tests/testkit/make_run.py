"""What `make run` runs, read from the Makefile's `run:` recipe: the one source tests compare docs and records with."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VERL_MAS = "$(VENV)/bin/verl-mas"


def make_run_arguments() -> list[str]:
    """The arguments `make run` passes to `verl-mas` (e.g. ["train", "preset=smollm2_math"])."""
    found = re.findall(r"^run: \$\(STAMP\)\n\t(.+)\n", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert len(found) == 1, f"the Makefile should have one `run:` recipe of one line, found {found}"
    command = shlex.split(found[0])
    assert command[0] == VERL_MAS, f"make run should call {VERL_MAS}, not {command[0]}"
    return command[1:]
