"""Installs requirements into the running interpreter's virtual environment with uv, from the sources pip is
configured with (indexes, wheel folders, constraints), and with pip itself where uv cannot be had or fails.

    .venv/bin/python bootstrap/venv_install.py "torch==2.13.0" -e ".[test,cpu]"

uv resolves, unpacks and compiles the same packages as pip in about half the time (the install is a good part of
a clean clone's first `make test` otherwise). Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

# pip's configuration keys that name where packages come from, and uv's flag for each (a value may list several,
# separated by whitespace, as pip reads it)
SOURCE_FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
# where `pip config list` says a value comes from (a config files' section, or `:env:` for a PIP_* variable), weakest
# first as `pip install` reads them: a key set in a stronger one replaces the weaker ones' value
SECTIONS = ("global", "install", ":env:")


def pip_settings(pip_config_list: str) -> dict[str, str]:
    """Each key's value in `pip config list`'s output (lines `section.key='value'`) as `pip install` reads it."""
    ranked: dict[str, tuple[int, str]] = {}
    for line in pip_config_list.splitlines():
        name, sep, quoted = line.partition("=")
        section, _, key = name.rpartition(".")
        if not sep or section not in SECTIONS:
            continue
        rank, value = SECTIONS.index(section), " ".join(shlex.split(quoted))
        if key not in ranked or rank >= ranked[key][0]:
            ranked[key] = (rank, value)
    return {key: value for key, (_, value) in ranked.items()}


def uv_source_flags(settings: dict[str, str]) -> list[str]:
    """uv's flags for the package sources in pip's `settings`, and pip's choice of the best version across every
    index (uv otherwise stops at the first index that has the package)."""
    flags = [
        part for key, flag in SOURCE_FLAGS.items() for item in settings.get(key, "").split() for part in (flag, item)
    ]
    return [*flags, "--index-strategy", "unsafe-best-match"]


def run(command: list[str], environment: dict[str, str] | None = None) -> int:
    print("+", shlex.join(command), flush=True)
    return subprocess.call(command, env=environment)


def uv_binary(python: str) -> Path | None:
    """The uv installed beside `python` (installed there by pip first when missing), or None when pip cannot."""
    uv = Path(python).parent / "uv"
    if not uv.exists() and run([python, "-m", "pip", "install", "-q", "uv"]) != 0:
        return None
    return uv if uv.exists() else None


def install(requirements: list[str]) -> int:
    python = sys.executable
    uv = uv_binary(python)
    if uv is not None:
        config = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
        settings = pip_settings(config.stdout)
        environment = os.environ | ({"SSL_CERT_FILE": settings["cert"]} if "cert" in settings else {})
        # compiled to bytecode as pip does: else the first runs' processes compile torch, vLLM and verl as they
        # import them (a clean clone on 2026-11-28: install 24 s instead of 73, pytest 25 min instead of 14, and a
        # launch timed out)
        sources = uv_source_flags(settings)
        command = [str(uv), "pip", "install", "-q", "--compile-bytecode", "--python", python, *sources, *requirements]
        if run(command, environment) == 0:
            return 0
        print("uv could not install them; installing with pip instead", flush=True)
    return run([python, "-m", "pip", "install", "-q", *requirements])


if __name__ == "__main__":
    sys.exit(install(sys.argv[1:]))
