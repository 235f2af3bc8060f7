"""Runs one untrusted program under every isolation layer this machine grants, within its limits."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .layers import (
    BOOTSTRAP,
    INTERPRETER,
    LOST_WITHOUT,
    PIVOT_ROOT_SYSCALL,
    PYTHON_PREFIX,
    Protections,
    ipc_sysctls,
    root_spec,
    uid_range_mapped,
    unshare_flags,
)
from .process import UID_BASE, UID_SPAN, communicate, kill_all, pick_uid


@dataclass(frozen=True)
class SandboxLimits:
    wall_time_s: float = 5.0
    cpu_time_s: int = 5
    memory_mb: int = 512  # address space (RLIMIT_AS) per process, not resident memory
    max_output_bytes: int = 64_000  # per stream; exceeding it ends the run
    max_processes: int = 64  # RLIMIT_NPROC, counts threads; root ignores it, hence the uid drop
    max_file_size_mb: int = 16  # RLIMIT_FSIZE: the largest single file
    max_disk_mb: int = 64  # everything the program can write (work dir, /tmp, /dev/shm) together

    def __post_init__(self) -> None:
        for name in (
            "wall_time_s",
            "cpu_time_s",
            "memory_mb",
            "max_output_bytes",
            "max_processes",
            "max_file_size_mb",
            "max_disk_mb",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None  # negative: killed by that signal (subprocess convention)
    timed_out: bool  # wall-clock or CPU-time limit hit
    memory_exceeded: bool
    output_truncated: bool
    # set when the sandbox itself failed (no process could be started, or the bootstrap's setup failed before the
    # program ran): the judge could not run the program, which is not the program's fault
    infra_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.infra_error is None


_MEMORY_ERROR = re.compile(r"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory")
MAX_OPEN_FILES = 1024  # bounds the kernel memory a process can pin in pipe and socket buffers
_PROBE_LIMITS = SandboxLimits(wall_time_s=60.0)


def run_python(code: str, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` as a Python program in the sandbox, feeding it `stdin`; never raises for child misbehaviour.

    The first call detects which isolation layers are available (`protections()`) and warns once about missing ones.
    A run the sandbox itself failed (`SandboxResult.infra_error`) is tried once more before it is returned.
    """
    layers = protections()
    result = _execute(code, stdin, limits or SandboxLimits(), layers)
    if result.infra_error is not None:
        result = _execute(code, stdin, limits or SandboxLimits(), layers)
    return result


DEFAULT_MAX_CONCURRENCY = max(1, os.cpu_count() or 1)
_max_concurrency = DEFAULT_MAX_CONCURRENCY
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def set_max_concurrency(n: int) -> None:
    """Bound how many `arun_python` children run at once (runs already started finish under the old bound)."""
    global _executor, _max_concurrency
    if n < 1:
        raise ValueError(f"max concurrency must be >= 1, got {n}")
    with _executor_lock:
        old, _executor, _max_concurrency = _executor, None, n
    if old is not None:
        old.shutdown(wait=False)


def _get_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(_max_concurrency, thread_name_prefix="verl_mas_sandbox")
        return _executor


async def arun_python(code: str, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """`run_python` off the event loop; the worker pool (size `set_max_concurrency`) is the concurrency bound.

    A thread pool rather than an asyncio.Semaphore because the bound must hold across event loops.
    """
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_get_executor(), run_python, code, stdin, limits)


_detected: Protections | None = None
_detect_lock = threading.Lock()


def protections() -> Protections:
    """Which isolation layers runs get here; detected once per process, with one RuntimeWarning if any is off.

    Raises RuntimeError where no program could run under the layers granted (as root without a mount namespace,
    the sandbox's user may be unable to read the interpreter), rather than failing every run later.
    """
    global _detected
    with _detect_lock:
        if _detected is None:
            found = _detect()
            if found.off():
                warnings.warn(_weaker_message(found), RuntimeWarning, stacklevel=2)
                if found.private_uid and (why := _probe(found)) is not None:
                    raise RuntimeError(f"sandbox: programs cannot run under the layers this machine grants: {why}")
            _detected = found
        return _detected


def _weaker_message(found: Protections) -> str:
    lines = [f"- {layer} ({found.why_off[layer]}): {LOST_WITHOUT[layer]}" for layer in found.off()]
    return "verl_mas.sandbox runs with weaker isolation; these layers are off:\n" + "\n".join(lines)


def _execute(code: str, stdin: str, limits: SandboxLimits, layers: Protections) -> SandboxResult:
    try:
        workdir = os.path.realpath(tempfile.mkdtemp(prefix="verl_mas_sandbox_"))
    except OSError as exc:
        return _infra_failure(f"no work dir: {exc}")
    try:
        return _run_in(workdir, code, stdin, limits, layers)
    except OSError as exc:  # the parent's own calls (fork, pipes, pidfd) failed: the host, not the program
        return _infra_failure(f"{type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _infra_failure(why: str) -> SandboxResult:
    return SandboxResult("", "", None, False, False, False, infra_error=f"the sandbox could not run the program: {why}")


def _run_in(workdir: str, code: str, stdin: str, limits: SandboxLimits, layers: Protections) -> SandboxResult:
    uid = pick_uid() if layers.private_uid else None
    with open(os.path.join(workdir, "main.py"), "wb") as f:
        f.write(code.encode("utf-8", "surrogatepass"))
    if uid is not None and not layers.filesystem:
        os.chown(workdir, uid, uid)  # with the filesystem layer the program gets its own work dir on the tmpfs
    fsize = limits.max_file_size_mb * 1024 * 1024
    memory = limits.memory_mb * 1024 * 1024
    disk = limits.max_disk_mb * 1024 * 1024
    open_files = _open_files_limit()
    config = {
        "uid": uid,
        "cwd": workdir,
        "unshare": unshare_flags(layers),
        "ipc_sysctls": ipc_sysctls(disk) if layers.ipc else [],
        "root": root_spec(disk) if layers.filesystem else None,
        "rlimits": [
            # SIGXCPU at the soft limit identifies a CPU timeout; SIGKILL a second later if it is ignored.
            ("RLIMIT_CPU", limits.cpu_time_s, limits.cpu_time_s + 1),
            ("RLIMIT_AS", memory, memory),
            ("RLIMIT_NPROC", limits.max_processes, limits.max_processes),
            ("RLIMIT_FSIZE", fsize, fsize),
            ("RLIMIT_NOFILE", open_files, open_files),
            ("RLIMIT_CORE", 0, 0),  # SIGXCPU/SIGSEGV would otherwise dump core into the workdir
        ],
    }
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8"}
    # The bootstrap writes one byte here once its setup is done, just before the program runs, and closes it: a run
    # without that byte failed in the sandbox's setup. The program cannot undo the byte, so it cannot fake that.
    started_read, started_write = os.pipe()
    config["started_fd"] = started_write
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [INTERPRETER, "-I", "-S", "-c", BOOTSTRAP, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=env,
            start_new_session=True,
            close_fds=True,
            pass_fds=(started_write,),
        )
    except OSError:
        os.close(started_read)
        raise
    finally:
        os.close(started_write)
    try:
        out, err, timed_out, truncated = communicate(
            proc, stdin.encode("utf-8", "surrogatepass"), start + limits.wall_time_s, limits.max_output_bytes, uid
        )
    finally:
        kill_all(proc.pid, uid)  # before reaping: the zombie keeps the pgid from being reused
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            pipe.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = exit_code = os.waitstatus_to_exitcode(status)
        with os.fdopen(started_read, "rb") as started:  # every writer is gone: this read cannot block
            program_started = started.read(1) == b"1"
    cpu_exceeded = exit_code == -signal.SIGXCPU or usage.ru_utime + usage.ru_stime >= limits.cpu_time_s
    stderr = err.decode("utf-8", errors="replace")
    setup_error = (stderr.strip().splitlines() or [f"exit code {exit_code}"])[-1]
    return SandboxResult(
        stdout=out.decode("utf-8", errors="replace"),
        stderr=stderr,
        exit_code=exit_code,
        timed_out=timed_out or cpu_exceeded,
        memory_exceeded=exit_code != 0 and _MEMORY_ERROR.search(stderr) is not None,
        output_truncated=truncated,
        infra_error=None if program_started else f"the sandbox's setup failed: {setup_error}",
    )


def _open_files_limit() -> int:
    """MAX_OPEN_FILES, or the parent's lower hard limit (only root may raise a hard limit)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(MAX_OPEN_FILES, hard)


def _detect() -> Protections:
    """Probe which layers the kernel grants by running a trivial program under them (all at once, else one by one).

    Fails closed where running weaker would hand the program root: as root, the uid drop is required.
    """
    if os.geteuid() != 0:
        why = "not root; rootless isolation is not implemented"
        return Protections(False, False, False, False, {layer: why for layer in LOST_WITHOUT})
    if not uid_range_mapped(UID_BASE, UID_SPAN):
        raise RuntimeError(f"sandbox: uids {UID_BASE}..{UID_BASE + UID_SPAN} are not mapped in this user namespace")
    namespaces = ("filesystem", "network", "ipc")
    if _probe(Protections(True, True, True, True, {})) is None:
        return Protections(True, True, True, True, {})
    why_off = {}
    for layer in namespaces:
        why = _probe(Protections(True, **{other: other == layer for other in namespaces}, why_off={}))
        if why is not None:
            why_off[layer] = why
    return Protections(True, *(layer not in why_off for layer in namespaces), why_off)


def _probe(layers: Protections) -> str | None:
    """None if a program runs under `layers`, else the sandbox's own error line (the kernel's refusal).

    Any other failure raises: a flaky or broken probe must not quietly switch a layer off.
    """
    if layers.filesystem and PIVOT_ROOT_SYSCALL is None:
        return f"pivot_root's syscall number is unknown on {platform.machine()}"
    result = _execute("import math, _socket", "", _PROBE_LIMITS, layers)
    if result.ok:
        return None
    last = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}, timed out: {result.timed_out}"])[-1]
    if "sandbox:" in last:
        return last
    on = [layer for layer in LOST_WITHOUT if getattr(layers, layer)]
    hint = (
        "" if layers.filesystem else "; without a private root the sandbox user must be able to read " + PYTHON_PREFIX
    )
    raise RuntimeError(f"sandbox: a trivial program fails with layers {on}: {last}{hint}")
