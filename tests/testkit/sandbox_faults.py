"""Test kit: make the sandbox itself fail on purpose, as a host out of processes makes it fail."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from verl_mas.sandbox import protections

#: a program holding this text fails to start while `fail_sandbox_starts` is on
FAIL_MARK = "# the host cannot start this one"


def fail_sandbox_starts(monkeypatch: pytest.MonkeyPatch, every: bool = False, times: int | None = None) -> list[str]:
    """Make the sandbox's process start raise OSError(EAGAIN), as fork does when the host is out of processes.

    Fails the starts of programs holding `FAIL_MARK` (of every program with `every`), at most `times` of them;
    returns the list the failed programs are appended to.
    """
    protections()  # the layers are detected with starts that work
    real_popen = subprocess.Popen
    failed: list[str] = []

    def popen(*args, **kwargs):
        main = os.path.join(kwargs.get("cwd") or "", "main.py")
        program = open(main, encoding="utf-8", errors="replace").read() if os.path.exists(main) else ""
        if (every or FAIL_MARK in program) and (times is None or len(failed) < times):
            failed.append(program)
            raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return failed
