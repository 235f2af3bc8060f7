"""Owns running untrusted, model-written Python code: every such program must go through `run_python`/`arun_python`.

Policy, when every layer is on (the parent is root and the kernel allows namespaces; `protections()` says which are):
- filesystem: a private mount namespace whose root is a fresh tmpfs of `max_disk_mb` (the total the program can
  write). Read-only: /usr, the top-level /bin, /sbin and /lib* (links or binds), the Python installation
  (sys.base_prefix), /etc/ld.so.cache and /etc/localtime. Generated: /etc/passwd and /etc/group (root and the
  sandbox user), /dev with null, zero, full, random, urandom, and a /proc showing only the program's own processes
  (hidepid=2). Writable: the work dir (cwd and HOME, 0700) and /tmp, /var/tmp, /dev/shm. Nothing else of the host
  exists there (not the repo, /root, /home, /work, the host's /tmp or /run, /sys), so no host file can be read or
  written and no unix-socket file reached. The host tree is detached (pivot_root) and the program is chrooted one
  level below the namespace root, which makes the kernel refuse it new user namespaces (in one it could mount an
  uncapped tmpfs);
- network: a private network namespace with no interface up: no network and no abstract unix sockets, even through
  raw syscalls; Python's socket module refuses to create sockets on top;
- ipc: a private IPC namespace with small SysV limits, so nothing of the host's is reachable and what the program
  leaves there dies with it;
- private uid: a random, otherwise unused uid, so the kernel refuses signals to the parent and to other runs,
  RLIMIT_NPROC is enforced (root ignores it) and every process of that uid is killed after the run, including ones
  that left the process group with setsid; no_new_privs;
- always: `python -I -S` with an empty environment in its own session, the process group SIGKILLed on timeout and
  again when the child exits; limits on CPU time, address space, processes, file size, open files, no core dumps;
  wall time enforced and output read incrementally and capped by the parent; os.kill/os.killpg refuse targets
  outside the child's process group.
Text: code and stdin are encoded as UTF-8 with `surrogatepass`, so no string makes `run_python` raise: a lone
surrogate in the code is a SyntaxError of the program (a failed run), one in stdin reaches it as undecodable bytes.
Not covered: memory is capped per process, so one run can hold up to max_processes x memory_mb plus the disk cap.

Where a layer cannot be had (not root: rootless isolation is not implemented; or the kernel refuses a namespace),
runs go on without it and the first run emits one RuntimeWarning naming each missing layer and what is lost.
docs/sandbox.md has the details and the hostile suite that checks them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import platform
import random
import re
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

__all__ = [
    "Protections",
    "SandboxLimits",
    "SandboxResult",
    "arun_python",
    "protections",
    "run_python",
    "set_max_concurrency",
]


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

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


# What a program can do when a layer is off; the warning quotes these.
LOST_WITHOUT = {
    "private_uid": "the program runs as this process's user: it can signal this process, read its /proc entries and "
    "files, and leave processes behind with setsid",
    "filesystem": "the program sees the host's files: it can read whatever is world-readable, write wherever this "
    "user or anyone may (/tmp, /run/lock), reach unix-socket files, and fill the disk (only the per-file cap holds)",
    "network": "raw syscalls (ctypes) reach the host's network and abstract unix sockets; only Python's socket "
    "module is blocked",
    "ipc": "the host's SysV IPC objects and POSIX message queues are reachable, and what the program creates there "
    "outlives it",
}


@dataclass(frozen=True)
class Protections:
    """The isolation layers sandbox runs get in this process (see the module docstring for what each guards)."""

    private_uid: bool
    filesystem: bool
    network: bool
    ipc: bool
    why_off: dict[str, str]  # layer -> why it is off (not root, or the kernel's refusal)

    def off(self) -> list[str]:
        return [layer for layer in LOST_WITHOUT if not getattr(self, layer)]


# Random per-run uids from a range no real account uses, so concurrent runs cannot signal each
# other and "every process of this uid" means exactly this run's processes.
_UID_BASE = 1 << 30
_UID_SPAN = 1 << 28
# Drawn from the OS, not from the `random` module: training runs seed that, and two runs of one seed would then draw
# the same uids, so each run's uid sweep would kill the other's programs.
_UID_SOURCE = random.SystemRandom()
_POLL_S = 0.05  # only used where pidfd_open is unavailable
_MEMORY_ERROR = re.compile(r"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory")
_MAX_OPEN_FILES = 1024  # bounds the kernel memory a process can pin in pipe and socket buffers
_TMPFS_INODES = 8192  # files and directories on the sandbox's tmpfs, so empty files cannot exhaust memory
# The base interpreter, not a venv's link to it: the venv (often inside the user's repo) is not visible in the sandbox.
_INTERPRETER = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
_PREFIX = os.path.realpath(sys.base_prefix)  # the Python installation, exposed read-only
# Host paths the sandbox sees read-only (or as the same symlink); the Python installation is added to them.
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache", "/etc/localtime")
_PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}.get(
    platform.machine()
)
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000
# SysV limits inside the private IPC namespace (the kernel's defaults allow tens of GB of semaphores and shared memory).
_IPC_SYSCTLS = {"shmmni": "16", "msgmni": "16", "sem": "250 4000 32 16"}
_PROBE_LIMITS = SandboxLimits(wall_time_s=60.0)

# Runs as `python -I -S -c _BOOTSTRAP CONFIG` in the host work dir: namespaces and the new root first (as root),
# then limits, then the uid drop, then the in-process blocks, then the user's main.py.
_BOOTSTRAP = r"""
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
with open("main.py", "rb") as f:
    src = f.read()
uid = cfg["uid"]
if uid is not None:
    import ctypes, stat
    libc = ctypes.CDLL(None, use_errno=True)
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
    MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18

    def check(ret, what):
        if ret != 0:
            err = ctypes.get_errno()
            raise OSError(err, "sandbox: %s: %s" % (what, os.strerror(err)))

    def mount(source, target, fstype, flags, data, what):
        check(libc.mount(source, target.encode(), fstype, flags, data), what)

    def expose(path, target):
        # A read-only bind of a host file or directory at the same path under the new root.
        if os.path.isdir(path):
            os.makedirs(target)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "x").close()
        mount(path.encode(), target, None, MS_BIND, None, "bind " + path)
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
        mount(None, target, None, flags, None, "make %s read-only" % path)

    def populate(fs, work, spec):
        for path in spec["binds"]:
            expose(path, fs + path)
        for path, dest in spec["links"]:
            os.makedirs(os.path.dirname(fs + path), exist_ok=True)
            os.symlink(dest, fs + path)
        os.makedirs(fs + "/dev", exist_ok=True)
        for name, minor in (("null", 3), ("zero", 5), ("full", 7), ("random", 8), ("urandom", 9)):
            os.mknod(fs + "/dev/" + name, stat.S_IFCHR | 0o666, os.makedev(1, minor))
            os.chmod(fs + "/dev/" + name, 0o666)
        for name, dest in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                           ("stderr", "/proc/self/fd/2")):
            os.symlink(dest, fs + "/dev/" + name)
        for scratch in ("/tmp", "/var/tmp", "/dev/shm"):
            os.makedirs(fs + scratch, exist_ok=True)
            os.chmod(fs + scratch, 0o1777)
        os.makedirs(fs + work, exist_ok=True)
        os.chmod(fs + work, 0o700)
        with open(fs + work + "/main.py", "wb") as f:
            f.write(src)
        for path in (fs + work, fs + work + "/main.py"):
            os.chown(path, uid, uid)
        os.makedirs(fs + "/etc", exist_ok=True)
        with open(fs + "/etc/passwd", "w") as f:
            f.write("root:x:0:0:root:/root:/usr/sbin/nologin\n")
            f.write("sandbox:x:%d:%d:sandbox:%s:/usr/sbin/nologin\n" % (uid, uid, work))
        with open(fs + "/etc/group", "w") as f:
            f.write("root:x:0:\nsandbox:x:%d:\n" % uid)
        os.makedirs(fs + "/proc")
        mount(b"proc", fs + "/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"hidepid=2", "mount /proc")

    def enter_new_root(work, spec):
        # The host work dir becomes the namespace's root (a tmpfs); the program's tree is built in its /fs.
        mount(None, "/", None, MS_REC | MS_PRIVATE, None, "make mounts private")
        mount(b"tmpfs", work, b"tmpfs", MS_NOSUID, spec["tmpfs"].encode(), "mount the root tmpfs")
        os.umask(0o022)
        populate(work + "/fs", work, spec)
        os.chdir(work)
        check(libc.syscall(spec["pivot_root"], b".", b"."), "pivot_root")
        check(libc.umount2(b".", 2), "detach the host's tree")  # MNT_DETACH
        os.chroot("/fs")  # below the namespace's root: the kernel then refuses new user namespaces
        os.chdir(work)

    if cfg["unshare"]:
        check(libc.unshare(cfg["unshare"]), "unshare(0x%x)" % cfg["unshare"])
    for name, value in cfg["ipc_sysctls"]:
        with open("/proc/sys/kernel/" + name, "w") as f:
            f.write(value)
    if cfg["root"]:
        enter_new_root(cfg["cwd"], cfg["root"])
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
    """Run `code` as a Python program in the sandbox, feeding it `stdin`; never raises for child misbehaviour.

    The first call detects which isolation layers are available (`protections()`) and warns once about missing ones.
    """
    return _execute(code, stdin, limits or SandboxLimits(), protections())


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
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="verl_mas_sandbox_"))
    try:
        return _run_in(workdir, code, stdin, limits, layers)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_in(workdir: str, code: str, stdin: str, limits: SandboxLimits, layers: Protections) -> SandboxResult:
    uid = _pick_uid() if layers.private_uid else None
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
        "unshare": _unshare_flags(layers),
        "ipc_sysctls": _ipc_sysctls(disk) if layers.ipc else [],
        "root": _root_spec(disk) if layers.filesystem else None,
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
    start = time.monotonic()
    proc = subprocess.Popen(
        [_INTERPRETER, "-I", "-S", "-c", _BOOTSTRAP, json.dumps(config)],
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
            proc, stdin.encode("utf-8", "surrogatepass"), start + limits.wall_time_s, limits.max_output_bytes, uid
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


def _open_files_limit() -> int:
    """_MAX_OPEN_FILES, or the parent's lower hard limit (only root may raise a hard limit)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return _MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(_MAX_OPEN_FILES, hard)


def _pick_uid() -> int:
    return _UID_BASE + _UID_SOURCE.randrange(_UID_SPAN)


def _detect() -> Protections:
    """Probe which layers the kernel grants by running a trivial program under them (all at once, else one by one).

    Fails closed where running weaker would hand the program root: as root, the uid drop is required.
    """
    if os.geteuid() != 0:
        why = "not root; rootless isolation is not implemented"
        return Protections(False, False, False, False, {layer: why for layer in LOST_WITHOUT})
    if not _uid_range_mapped(_UID_BASE, _UID_SPAN):
        raise RuntimeError(f"sandbox: uids {_UID_BASE}..{_UID_BASE + _UID_SPAN} are not mapped in this user namespace")
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
    if layers.filesystem and _PIVOT_ROOT_SYSCALL is None:
        return f"pivot_root's syscall number is unknown on {platform.machine()}"
    result = _execute("import math, _socket", "", _PROBE_LIMITS, layers)
    if result.ok:
        return None
    last = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}, timed out: {result.timed_out}"])[-1]
    if "sandbox:" in last:
        return last
    on = [layer for layer in LOST_WITHOUT if getattr(layers, layer)]
    hint = "" if layers.filesystem else f"; without a private root the sandbox user must be able to read {_PREFIX}"
    raise RuntimeError(f"sandbox: a trivial program fails with layers {on}: {last}{hint}")


def _unshare_flags(layers: Protections) -> int:
    return (
        (_CLONE_NEWNS if layers.filesystem else 0)
        | (_CLONE_NEWNET if layers.network else 0)
        | (_CLONE_NEWIPC if layers.ipc else 0)
    )


def _ipc_sysctls(disk_bytes: int) -> list[tuple[str, str]]:
    """SysV shared memory limited to the disk cap, with few queues and semaphores."""
    page = os.sysconf("SC_PAGE_SIZE")
    limits = {"shmmax": str(disk_bytes), "shmall": str(disk_bytes // page), **_IPC_SYSCTLS}
    return sorted(limits.items())


def _root_spec(disk_bytes: int) -> dict:
    binds, links = _host_view()
    return {
        "binds": binds,
        "links": links,
        "tmpfs": f"mode=755,size={disk_bytes},nr_inodes={_TMPFS_INODES}",
        "pivot_root": _PIVOT_ROOT_SYSCALL,
    }


@functools.cache
def _host_view() -> tuple[list[str], list[tuple[str, str]]]:
    """What of the host the sandbox sees: (paths bound read-only, top-level symlinks recreated as they are)."""
    binds: list[str] = []
    links: list[tuple[str, str]] = []
    for path in (*_SYSTEM_PATHS, _PREFIX, _INTERPRETER):
        if not os.path.lexists(path) or any(_under(path, bound) for bound in binds):
            continue
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        else:
            binds.append(path)
    return binds, links


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _uid_range_mapped(base: int, span: int) -> bool:
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            ranges = [tuple(map(int, line.split())) for line in f if line.strip()]
    except OSError:
        return True  # no user namespaces: every uid is valid
    return any(inside <= base and base + span <= inside + count for inside, _, count in ranges)
