"""What the update probes share: their command line (a run's saved config, learning rates) and their JSON record."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def probe_parser(module: str, description: str | None, per_rate: str) -> argparse.ArgumentParser:
    """The parser of `python -m module`: a run's config.json, and --lr, the rates to probe, one `per_rate` each."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {module}", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config", type=Path, help="a run's config.json (its model.path is the starting model)")
    parser.add_argument("--lr", type=float, nargs="+", default=[3e-4], help=f"one {per_rate} per rate (default: 3e-4)")
    return parser


def check_rates(parser: argparse.ArgumentParser, rates: Sequence[float]) -> None:
    """Stop with the parser's usage unless every rate is positive and finite."""
    if not all(0 < lr < math.inf for lr in rates):
        parser.error(f"--lr rates must be positive and finite, got {list(rates)}")


def write_results(out: Path, module: str, argv: Sequence[str] | None, results: Sequence[dict[str, Any]]) -> None:
    """`results` as JSON at `out`, with the command that made them (`argv`: its arguments, None for sys.argv's)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    command = shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])
    out.write_text(json.dumps({"command": command, "results": list(results)}, indent=2))
