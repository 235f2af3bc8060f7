"""Owns running untrusted, model-written Python code: every such program must go through `run_python`/`arun_python`.

Protections, per run:
- a fresh temporary working directory (removed afterwards) and an empty environment;
- the child is `python -I -S` (no site-packages, no PYTHON* variables) in its own session, and the
  whole process group is SIGKILLed on timeout and again as soon as the child exits, which reaps
  background children it left behind;
- resource limits: CPU time, address space (RLIMIT_AS), processes, file size, no core dumps;
  wall time is enforced by the parent; output is read incrementally and capped;
- when the parent is root (the case on training nodes), the child also gets:
  a private mount namespace whose /tmp, /var/tmp and /dev/shm are small throw-away tmpfs mounts
  (so it cannot write outside its directory) and where directories the unprivileged child could
  not traverse (e.g. /root, holding a pyenv interpreter) are masked except the stdlib;
  a private network namespace (no interfaces up, so no network even through ctypes);
  no_new_privs; and a random, otherwise unused uid, so the kernel refuses signals to the parent,
  reads of /proc/<parent>/environ and writes to root-owned paths, RLIMIT_NPROC is enforced (root
  ignores it), and every process of that uid, including ones that left the group via setsid,
  is killed after the run;
- defence in depth inside the child: socket creation raises and os.kill/os.killpg refuse targets
  outside the child's own process group.
Without root, only the limits, the process-group kill and the in-child Python-level blocks apply.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

__all__ = ["SandboxLimits", "SandboxResult", "arun_python", "run_python", "set_max_concurrency"]


@dataclass(frozen=True)
class SandboxLimits:
    wall_time_s: float = 5.0
    cpu_time_s: int = 5
    memory_mb: int = 512  # address space (RLIMIT_AS), not resident memory
    max_output_bytes: int = 64_000  # per stream; exceeding it ends the run
    max_processes: int = 64  # RLIMIT_NPROC, counts threads; root ignores it, hence the uid drop
    max_file_size_mb: int = 16  # RLIMIT_FSIZE, also the size of each private tmpfs

    def __post_init__(self) -> None:
        for name in ("wall_time_s", "cpu_time_s", "memory_mb", "max_output_bytes", "max_processes", "max_file_size_mb"):
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

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


# Random per-run uids from a range no real account uses, so concurrent runs cannot signal each
# other and "every process of this uid" means exactly this run's processes.
_UID_BASE = 1 << 30
_UID_SPAN = 1 << 28
# Drawn from the OS, not from the `random` module: training runs seed that, and two runs of one seed would then draw
# the same uids, so each run's uid sweep would kill the other's programs.
_UID_SOURCE = random.SystemRandom()
_POLL_S = 0.05  # only used where pidfd_open is unavailable
_MEMORY_ERROR = re.compile(r"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory")
_WRITABLE_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
# Tests switch this off to exercise the Python-level socket block on its own.
_NET_NAMESPACE = True

# Runs as `python -I -S -c _BOOTSTRAP CONFIG` in the working directory; root-only steps first,
# then limits, then the uid drop, then the in-process blocks, then the user's main.py.
_BOOTSTRAP = r"""
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
with open("main.py", "rb") as f:
    src = f.read()
uid = cfg["uid"]
if uid is not None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    def check(ret, what):
        if ret != 0:
            err = ctypes.get_errno()
            raise OSError(err, "sandbox: %s: %s" % (what, os.strerror(err)))
    if cfg["netns"]:
        libc.unshare(0x40000000)  # CLONE_NEWNET; if refused, the socket block below still applies
    check(libc.unshare(0x00020000), "unshare(CLONE_NEWNS)")
    MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
    check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make mounts private")
    for target, keep, opts in cfg["masks"]:
        fds = [os.open(p, os.O_PATH | os.O_DIRECTORY) for p in keep]
        check(libc.mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts.encode()), "mask " + target)
        for p, fd in zip(keep, fds):
            os.makedirs(p, exist_ok=True)
            check(libc.mount(b"/proc/self/fd/%d" % fd, p.encode(), None, MS_BIND | MS_REC, None), "expose " + p)
            os.close(fd)
    os.chdir(cfg["cwd"])
    check(libc.prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
for name, soft, hard in cfg["rlimits"]:
    resource.setrlimit(getattr(resource, name), (soft, hard))
if uid is not None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("sandbox: failed to drop privileges")

import _socket, errno

class _NoSocket(_socket.socket):
    __slots__ = ()  # socket.socket subclasses this and declares __weakref__ itself
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        if fileno is None:  # wrapping an existing fd (socketpair, used by asyncio) stays allowed
            raise PermissionError(errno.EACCES, "network access is disabled in the sandbox")
        super().__init__(family, type, proto, fileno)

_socket.socket = _socket.SocketType = _NoSocket

def _guard_signals():
    kill, killpg, getpgid, own = os.kill, os.killpg, os.getpgid, os.getpgid(0)
    def refuse():
        raise PermissionError(errno.EPERM, "signals outside the sandbox are not allowed")
    def guarded_kill(pid, sig):
        if pid == -1 or (pid < -1 and -pid != own) or (pid > 0 and getpgid(pid) != own):
            refuse()
        kill(pid, sig)
    def guarded_killpg(pgid, sig):
        if pgid not in (0, own):
            refuse()
        killpg(pgid, sig)
    os.kill, os.killpg = guarded_kill, guarded_killpg

_guard_signals()
import types
main = types.ModuleType("__main__")
main.__file__ = "main.py"
sys.modules["__main__"] = main
sys.argv[:] = ["main.py"]
exec(compile(src, "main.py", "exec"), main.__dict__)
"""


def run_python(code: str, stdin: str = "", limits: SandboxLimits | None = None) -> SandboxResult:
    """Run `code` as a Python program in the sandbox, feeding it `stdin`; never raises for child misbehaviour."""
    limits = limits or SandboxLimits()
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="verl_mas_sandbox_"))
    try:
        return _run_in(workdir, code, stdin, limits)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


_DEFAULT_MAX_CONCURRENCY = max(1, os.cpu_count() or 1)
_max_concurrency = _DEFAULT_MAX_CONCURRENCY
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


def _run_in(workdir: str, code: str, stdin: str, limits: SandboxLimits) -> SandboxResult:
    uid = _pick_uid()
    with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
        f.write(code)
    if uid is not None:
        os.chown(workdir, uid, uid)
    fsize = limits.max_file_size_mb * 1024 * 1024
    memory = limits.memory_mb * 1024 * 1024
    config = {
        "uid": uid,
        "netns": _NET_NAMESPACE,
        "cwd": workdir,
        "masks": _masks(workdir, fsize) if uid is not None else [],
        "rlimits": [
            # SIGXCPU at the soft limit identifies a CPU timeout; SIGKILL a second later if it is ignored.
            ("RLIMIT_CPU", limits.cpu_time_s, limits.cpu_time_s + 1),
            ("RLIMIT_AS", memory, memory),
            ("RLIMIT_NPROC", limits.max_processes, limits.max_processes),
            ("RLIMIT_FSIZE", fsize, fsize),
            ("RLIMIT_CORE", 0, 0),  # SIGXCPU/SIGSEGV would otherwise dump core into the workdir
        ],
    }
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8"}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=env,
        start_new_session=True,
        close_fds=True,
    )
    try:
        out, err, timed_out, truncated = _communicate(
            proc, stdin.encode("utf-8"), start + limits.wall_time_s, limits.max_output_bytes, uid
        )
    finally:
        _kill_all(proc.pid, uid)  # before reaping: the zombie keeps the pgid from being reused
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            pipe.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = exit_code = os.waitstatus_to_exitcode(status)
    cpu_exceeded = exit_code == -signal.SIGXCPU or usage.ru_utime + usage.ru_stime >= limits.cpu_time_s
    stderr = err.decode("utf-8", errors="replace")
    return SandboxResult(
        stdout=out.decode("utf-8", errors="replace"),
        stderr=stderr,
        exit_code=exit_code,
        timed_out=timed_out or cpu_exceeded,
        memory_exceeded=exit_code != 0 and _MEMORY_ERROR.search(stderr) is not None,
        output_truncated=truncated,
    )


def _communicate(
    proc: subprocess.Popen, data: bytes, deadline: float, cap: int, uid: int | None
) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin and collect capped output until the child has exited and its pipes are closed.

    Returns (stdout, stderr, timed_out, truncated). When the child exits, its group is killed at
    once, so grandchildren holding the pipes open cannot stretch the run to the deadline.
    """
    assert proc.stdin and proc.stdout and proc.stderr
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    stdin_fd, sent = proc.stdin.fileno(), 0
    if data:
        os.set_blocking(stdin_fd, False)
        sel.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None
    open_outputs, exited = len(bufs), False
    try:
        while True:
            if not exited and pidfd is None:
                exited = _has_exited(proc.pid)
                if exited:
                    _kill_all(proc.pid, uid)
            if exited and open_outputs == 0:
                return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), False, False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for key, _ in sel.select(remaining if pidfd is not None else min(remaining, _POLL_S)):
                fd = key.fd
                if fd == pidfd:
                    sel.unregister(fd)
                    exited = True
                    _kill_all(proc.pid, uid)
                elif fd == stdin_fd:
                    try:
                        sent += os.write(fd, data[sent : sent + 65536])
                    except BrokenPipeError:
                        sent = len(data)
                    if sent >= len(data):
                        sel.unregister(fd)
                        proc.stdin.close()
                else:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        sel.unregister(fd)
                        open_outputs -= 1
                        continue
                    buf = bufs[fd]
                    room = cap - len(buf)
                    buf += chunk[:room]
                    if len(chunk) > room:
                        # A program printing past the cap is killed rather than drained until the deadline.
                        return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), False, True
        return bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), True, False
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)


def _has_exited(pid: int) -> bool:
    """Exit check that leaves the child a zombie, so its pgid stays reserved for `_kill_all`."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_all(pgid: int, uid: int | None) -> None:
    """SIGKILL the child's process group and, with a private uid, every live process of that uid.

    The uid sweep catches processes that escaped the group with setsid(); RLIMIT_NPROC bounds how
    many there can be, so repeating until none is found terminates.
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if uid is None:
        return
    for _ in range(200):
        pids = _live_pids_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.001)


def _live_pids_of_uid(uid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as f:
                status = f.read()
        except OSError:
            continue
        state = re.search(r"^State:\s+(\S)", status, re.M)
        uids = re.search(r"^Uid:\s+(.*)$", status, re.M)
        if state and uids and state.group(1) not in "ZX" and str(uid) in uids.group(1).split():
            found.append(int(entry))
    return found


def _pick_uid() -> int | None:
    """A fresh unprivileged uid when running as root, else None (the child keeps the parent's uid).

    Fails closed: as root, untrusted code must never run without the uid drop.
    """
    if os.geteuid() != 0:
        return None
    if not _uid_range_mapped(_UID_BASE, _UID_SPAN):
        raise RuntimeError(f"sandbox: uids {_UID_BASE}..{_UID_BASE + _UID_SPAN} are not mapped in this user namespace")
    return _UID_BASE + _UID_SOURCE.randrange(_UID_SPAN)


def _uid_range_mapped(base: int, span: int) -> bool:
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            ranges = [tuple(map(int, line.split())) for line in f if line.strip()]
    except OSError:
        return True  # no user namespaces: every uid is valid
    return any(inside <= base and base + span <= inside + count for inside, _, count in ranges)


def _masks(workdir: str, tmpfs_bytes: int) -> list[tuple[str, list[str], str]]:
    """Mounts for the child: (target, paths under it to keep visible, tmpfs options).

    The shared scratch directories become private tmpfs (keeping the workdir), and the first
    ancestor of the stdlib that other users cannot traverse is replaced by an empty tmpfs that
    exposes only the stdlib.
    """
    prefix = os.path.realpath(sys.base_prefix)
    masks: list[tuple[str, list[str], str]] = []
    hidden = next((a for a in _ancestors(prefix) if not os.stat(a).st_mode & 0o001), None)
    if hidden is not None:
        masks.append((hidden, [prefix] + [p for p in (workdir,) if _under(p, hidden)], "mode=755,size=1m"))
    scratch = {os.path.realpath(d) for d in (*_WRITABLE_TMP_DIRS, tempfile.gettempdir()) if os.path.isdir(d)}
    for target in sorted(scratch):
        if hidden is not None and (_under(target, hidden) or _under(hidden, target)):
            continue
        if _under(prefix, target):
            continue
        keep = [workdir] if _under(workdir, target) else []
        masks.append((target, keep, f"mode=1777,size={tmpfs_bytes}"))
    return masks


def _ancestors(path: str) -> list[str]:
    """Proper ancestors of an absolute path, outermost first, without '/'."""
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
