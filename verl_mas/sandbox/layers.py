"""Owns the sandbox's isolation layers: which exist, how a run asks for them, and the child's bootstrap script."""

from __future__ import annotations

import functools
import os
import platform
import sys
from dataclasses import dataclass

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
    """The isolation layers sandbox runs get in this process (`verl_mas.sandbox`'s docstring says what each guards)."""

    private_uid: bool
    filesystem: bool
    network: bool
    ipc: bool
    why_off: dict[str, str]  # layer -> why it is off (not root, or the kernel's refusal)

    def off(self) -> list[str]:
        return [layer for layer in LOST_WITHOUT if not getattr(self, layer)]


TMPFS_INODES = 8192  # files and directories on the sandbox's tmpfs, so empty files cannot exhaust memory
# The base interpreter, not a venv's link to it: the venv (often inside the user's repo) is not visible in the sandbox.
INTERPRETER = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
PYTHON_PREFIX = os.path.realpath(sys.base_prefix)  # the Python installation, exposed read-only
# Host paths the sandbox sees read-only (or as the same symlink); the Python installation is added to them.
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache", "/etc/localtime")
PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}.get(platform.machine())
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000
# SysV limits inside the private IPC namespace (the kernel's defaults allow tens of GB of semaphores and shared memory).
_IPC_SYSCTLS = {"shmmni": "16", "msgmni": "16", "sem": "250 4000 32 16"}

# Runs as `python -I -S -c BOOTSTRAP CONFIG` in the host work dir: namespaces and the new root first (as root),
# then limits, then the uid drop, then the in-process blocks, then the user's main.py.
BOOTSTRAP = r"""
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
os.write(cfg["started_fd"], b"1")  # the setup is done: what fails from here on is the program's
os.close(cfg["started_fd"])
import types
main = types.ModuleType("__main__")
main.__file__ = "main.py"
sys.modules["__main__"] = main
sys.argv[:] = ["main.py"]
exec(compile(src, "main.py", "exec"), main.__dict__)
"""


def unshare_flags(layers: Protections) -> int:
    return (
        (_CLONE_NEWNS if layers.filesystem else 0)
        | (_CLONE_NEWNET if layers.network else 0)
        | (_CLONE_NEWIPC if layers.ipc else 0)
    )


def ipc_sysctls(disk_bytes: int) -> list[tuple[str, str]]:
    """SysV shared memory limited to the disk cap, with few queues and semaphores."""
    page = os.sysconf("SC_PAGE_SIZE")
    limits = {"shmmax": str(disk_bytes), "shmall": str(disk_bytes // page), **_IPC_SYSCTLS}
    return sorted(limits.items())


def root_spec(disk_bytes: int) -> dict:
    binds, links = host_view()
    return {
        "binds": binds,
        "links": links,
        "tmpfs": f"mode=755,size={disk_bytes},nr_inodes={TMPFS_INODES}",
        "pivot_root": PIVOT_ROOT_SYSCALL,
    }


@functools.cache
def host_view() -> tuple[list[str], list[tuple[str, str]]]:
    """What of the host the sandbox sees: (paths bound read-only, top-level symlinks recreated as they are)."""
    binds: list[str] = []
    links: list[tuple[str, str]] = []
    for path in (*_SYSTEM_PATHS, PYTHON_PREFIX, INTERPRETER):
        if not os.path.lexists(path) or any(_under(path, bound) for bound in binds):
            continue
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        else:
            binds.append(path)
    return binds, links


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def uid_range_mapped(base: int, span: int) -> bool:
    try:
        with open("/proc/self/uid_map", encoding="ascii") as f:
            ranges = [tuple(map(int, line.split())) for line in f if line.strip()]
    except OSError:
        return True  # no user namespaces: every uid is valid
    return any(inside <= base and base + span <= inside + count for inside, _, count in ranges)
