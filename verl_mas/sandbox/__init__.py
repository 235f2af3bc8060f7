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
Layout: this package's names (`__all__`) are its public face; `runner` runs one program, `layers` sets up the
isolation layers (and holds the child's bootstrap script), `process` controls the child's processes.
"""

from .runner import (
    Protections,
    SandboxLimits,
    SandboxResult,
    arun_python,
    protections,
    run_python,
    set_max_concurrency,
)

__all__ = [
    "Protections",
    "SandboxLimits",
    "SandboxResult",
    "arun_python",
    "protections",
    "run_python",
    "set_max_concurrency",
]
