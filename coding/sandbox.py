"""
Run untrusted Python programs (model completions) in a throwaway, resource-limited sandbox.

Used by code_reward.py for the test-case rewards of Skywork-OR1 (1 iff all
tests pass), Ring-lite (same) and MiMo (§3.3.1, test-difficulty-driven reward). Stdlib only.
This contains accidents and reward hacks of an RL policy; it is not a security boundary against
a determined attacker (no VM, shared kernel; the seccomp filter covers only the key syscalls and
user namespaces).

The program sees a list of places, not the host minus a list: a fresh root that holds the
interpreter and its stdlib (read-only), the shared libraries they load (read-only), a minimal
/dev, its own /proc and its own empty /tmp. Nothing else of the host's tree exists for it.

One run (`run_python`):
  1. The parent writes config + program to a root-only temp file and the test input to another,
     and starts `python -I -S -c _BOOTSTRAP <fd>` in a NEW SESSION with a scrubbed environment
     (PATH, LANG, HOME only). `-I` ignores PYTHON* variables and the user site; `-S` skips
     `site`, so only the stdlib is importable. Stdin is the input file itself, so `open(0)` works.
  2. The bootstrap, still root, joins the slot's memory + pids cgroups (where writable), enters
     new network, mount, IPC, UTS and PID namespaces (unshare(2) through ctypes: Python 3.11 has
     no os.unshare) and forks. The root parent stays outside, reaps, and relays the exit status.
  3. The child (init of the new PID namespace) builds the fresh root on an empty tmpfs:
       - read-only bind mounts of exactly `isolation()["allowlist"]`: the real path of
         sys.base_prefix (interpreter, libpython, stdlib, lib-dynload) and the directory of the
         dynamic loader and libc (the distribution's shared libraries: libssl, libffi, libz...
         that lib-dynload links). On the dev box: /root/.pyenv/versions/3.11.7 and
         /usr/lib/x86_64-linux-gnu.
         A directory, not a list of files: a bind costs ~6 us + ~2 us for the read-only remount
         (bench/sandbox_speed.py), and a per-file list would miss libraries loaded by dlopen().
         A virtual environment is not bound, nor its path made: under `-S` its site-packages is
         never on sys.path, and inside, sys.executable is the interpreter's real path, so the
         interpreter can run itself again (subprocess, multiprocessing's spawn) and a venv kept
         inside the checkout does not name the checkout's directory;
       - symlinks as on the host on the way to the ELF interpreter (/lib64 -> usr/lib64), so it
         resolves as on the host;
       - /dev with null, zero, random, urandom (device nodes), fd/stdin/stdout/stderr links into
         /proc/self/fd, and /dev/shm -> /tmp (POSIX semaphores for multiprocessing);
       - /proc of the new PID namespace, with subset=pid (Linux 5.8+, else the full procfs): only
         this run's processes, none of /proc/keys, /proc/sys, /proc/mounts...;
       - /tmp: a size-capped tmpfs owned by the slot uid, the working directory and HOME;
       - the host name "sandbox" (the new UTS namespace starts with the host's);
     then remounts the root read-only and pivot_root()s into it, detaching the old root, so the
     host's tree is gone from this mount namespace (not just out of reach, as after chroot).
     No /etc (no passwd, no resolv.conf, no localtime: time is UTC), no /usr/bin, no /sys, no /run.
  4. It sets rlimits, raises its nice value, sets no_new_privs, drops to a per-slot uid/gid
     (61000 + n) with no supplementary groups, sets PR_SET_PDEATHSIG(SIGKILL), and installs a
     seccomp filter that answers EPERM to add_key, request_key and keyctl, to setns, and to unshare
     and clone asking for a new user namespace, and ENOSYS to clone3 (see below).
  5. Only then is the program compiled and executed as `__main__` in the same interpreter. In
     function-call mode the bootstrap then calls the named function with the arguments and prints
     the JSON result after a marker on stdout.
  6. The parent reads stdout/stderr with caps and enforces the wall-clock timeout. To stop a run
     it runs `kill -KILL -1` as the slot uid (kills every process of that uid, atomically with
     respect to fork), then the session's process group. When init of a PID namespace dies the
     kernel kills and reaps everything inside, so no stray process, not even a zombie, survives.
Expected outputs never enter the sandbox: comparison happens in the parent (code_reward.py), so
a program can only score by producing the right answer.

Kernel keyrings are per uid and outlive processes (the user keyring, the user-session keyring,
the persistent keyring, for days), and the session keyring is inherited from the trainer: a slot
uid reused by the next run would find what this one stored. No namespace covers them, so the
seccomp filter refuses the three key syscalls outright (EPERM, as Docker's default profile does)
instead of giving each run a fresh session keyring, which would leave the per-uid keyrings
open. The filter also refuses every syscall of another ABI (i386 int 0x80, x32), whose numbers
it does not check. Other per-uid or per-host state, each with its own namespace per run: SysV
IPC and POSIX message queues (IPC namespace), abstract unix sockets (network namespace), files
(nothing writable outlives the run's tmpfs), processes (PID namespace).

User namespaces: unshare(CLONE_NEWUSER) needs no privilege, and inside the new namespace the program
holds every capability, which opens kernel code (mounts of many filesystem types, netfilter, ...)
that has been the way out of most container escapes of recent years. The filter refuses it: EPERM
for unshare and clone when their flags (the first argument, which a filter can read) hold
CLONE_NEWUSER, EPERM for setns, and ENOSYS for clone3, whose flags sit in a struct the filter cannot
read; the C library then falls back to clone for threads, fork and posix_spawn (glibc 2.34+ tries
clone3 first), as under Docker's and systemd's profiles. Cost (bench/sandbox_speed.py, its last
table; two runs on the dev box under shared load): any filter adds 120-170 ns to each syscall, and
the full filter (18 instructions) is within +-30 ns of the key-only one (10); a sandboxed stdin test
makes fewer than 700 syscalls (strace -f), so the new tests cost well under 0.1 ms of a run that
takes ~30 ms of CPU: per-run times before and after did not differ beyond the load's noise.

Measured on the dev box (root, Linux 6.18, cgroup v1 writable, Python 3.11): RLIMIT_NPROC is
IGNORED for root (a root process with NPROC=5 forked 20 children), hence the uid drop. The
hostile corpus of tests/test_sandbox.py (resource exhaustion, escapes, persistence between runs,
snooping: 58 completions, each with a probe of its side effect) is contained; against the
hide-list sandbox this replaced, 13 of them escaped (keyrings x5, the training data file, host
unix sockets x2, other checkouts and /etc, and reads through /proc/*/root, user namespaces, chroot).

| threat                      | defence                                                | what remains                           |
|-----------------------------|--------------------------------------------------------|----------------------------------------|
| infinite loop, sleep        | wall timeout -> kill; RLIMIT_CPU; stdin is a finite file| none                                  |
| fork / thread bomb          | RLIMIT_NPROC on a per-slot uid (root ignores NPROC);   | without root: NPROC counts all our own |
|                             | pids cgroup; PID namespace torn down with its init      | processes, so a bomb just fails; no    |
|                             |                                                        | sweep of setsid'ed children            |
| memory hog                  | RLIMIT_AS per process; memory cgroup per run           | without cgroups: nproc x RLIMIT_AS     |
| disk fill, write outside cwd| fresh root read-only; /tmp (and /dev/shm -> /tmp) a    | without namespaces: world-writable host|
|                             | private size-capped tmpfs; RLIMIT_FSIZE                | dirs (/tmp, /dev/shm) are writable, up |
|                             |                                                        | to RLIMIT_FSIZE per file               |
| delete/modify host files    | no host file is in the fresh root but the read-only    | without namespaces: world-writable     |
|                             | allowlist; unprivileged uid anyway                     | files anywhere                         |
| read answers, data, other   | not in the fresh root: only the interpreter, its stdlib| the allowlist (read-only software);    |
| checkouts, /etc, /home      | and the shared-library directory exist; expected       | without namespaces: every world-       |
|                             | outputs never sent to the child                        | readable host file                     |
| carry state to a later run  | files: per-run tmpfs; processes: PID ns; SysV IPC and  | without namespaces: world-writable host|
|                             | mqueues: IPC ns; abstract sockets: net ns; kernel      | dirs; on an arch without a syscall     |
|                             | keyrings: seccomp EPERM for add_key/request_key/keyctl | table here (_ARCH): keyrings           |
| read the parent's env       | env scrubbed; own /proc (PID ns); other uid anyway     | none known                             |
| network, incl. loopback     | network namespace with no interface up: ENETUNREACH;   | without namespaces: FULL network. A    |
| and unix sockets            | host socket files absent from the fresh root; abstract | Python-level socket patch would not be |
|                             | sockets are per network namespace                      | isolation, so none is pretended        |
| kill / trace parent, others | other uid -> EPERM; PID namespace hides host pids;     | without root: the child CAN signal the |
|                             | one uid per concurrent run                             | trainer (same uid)                     |
| escape the root             | pivot_root + detach: the host tree is not in the mount | on an arch without a syscall table     |
|                             | namespace at all; no caps; no user namespace (seccomp: | here (_ARCH): user namespaces (kernel  |
|                             | unshare/clone with CLONE_NEWUSER, setns; clone3 ENOSYS)| attack surface), showing the same root |
| huge output                 | stdout cap kills the run ("output_limit"); stderr      | none                                   |
|                             | truncated                                              |                                        |
| setuid binaries             | none in the fresh root; PR_SET_NO_NEW_PRIVS            | none known                             |
| kernel bugs, side channels  | nothing                                                | everything                             |

Fallbacks, each checked by running the real bootstrap once and reported as a RuntimeWarning and
by `isolation()`: not root -> no uid drop, no namespaces, no cgroups, the host's whole tree
(rlimits, session kill, timeouts, and the seccomp filter, which needs no privilege); root but
unshare, a mount or pivot_root refused (e.g. Docker's default profile, or a root on initramfs
where pivot_root fails) -> uid drop, rlimits, cgroups, seccomp, no fresh root; the root parent
is then a child subreaper and sweeps the slot uid when the program exits, so leftovers still
die and are reaped. Seccomp refused, or an arch missing from _ARCH -> no key or user-namespace filter.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import marshal
import math
import os
import queue
import selectors
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

RESULT_MARKER = "\x1e__SANDBOX_RESULT__"  # function-call mode: last stdout line carrying the JSON return value
BOOTSTRAP_ERROR = "sandbox-bootstrap-error:"  # stderr prefix when the sandbox itself failed to set up
SLOT_UID_BASE, SLOT_UID_COUNT = 61000, 1000  # per-slot uids 61000..61999; must not belong to real users
SLOT_LOCK_DIR = "/run/grpo-sandbox" if os.path.isdir("/run") else "/tmp/grpo-sandbox-locks"
MAX_SLOTS = 64  # at most this many concurrent runs per process; more wait for a free slot
# Per-slot memory + pids cgroups give a hard total memory cap per run (otherwise the bound is
# nproc x RLIMIT_AS). Moving a process into a cgroup v1 adds ~20-50 ms of latency per run here
# (the kernel waits for an RCU grace period on attach), but it is sleep, not CPU: a parallel pool
# loses no throughput (bench/sandbox_speed.py). GRPO_SANDBOX_CGROUPS=0 turns them off.
USE_CGROUPS = os.environ.get("GRPO_SANDBOX_CGROUPS", "1") != "0"
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
_KILL = shutil.which("kill") or "/bin/kill"
# os.uname().machine -> (AUDIT_ARCH_* of the native syscall ABI, (add_key, request_key, keyctl), pivot_root,
#                        (clone, clone3, unshare, setns))
_ARCH = {"x86_64": (0xC000003E, (248, 249, 250), 155, (56, 435, 272, 308)),
         "aarch64": (0xC00000B7, (217, 218, 219), 41, (220, 435, 97, 268))}
CLONE_NEWUSER = 0x10000000
_RESERVED = ("/dev", "/proc", "/tmp")  # made fresh in the new root; nothing of the host's may sit there


@dataclass(frozen=True)
class Limits:
    """Per-run limits. Defaults suit competitive-programming tests (APPS/TACO/LiveCodeBench)."""

    timeout: float = 5.0  # wall-clock seconds, the one that matters for tests
    cpu_seconds: int | None = None  # RLIMIT_CPU; None -> ceil(timeout) + 1
    memory_bytes: int = 1 << 30  # RLIMIT_AS per process, and memory cgroup limit per run
    tmpfs_bytes: int = 32 << 20  # size of the private /tmp working directory
    file_bytes: int = 16 << 20  # RLIMIT_FSIZE: largest file the program may write
    nproc: int = 16  # RLIMIT_NPROC (per slot uid) and pids.max
    nofile: int = 64  # RLIMIT_NOFILE
    stdout_bytes: int = 4 << 20  # more stdout than this kills the run ("output_limit")
    stderr_bytes: int = 64 << 10  # stderr is truncated, not fatal
    nice: int = 10  # lower priority so the trainer stays responsive


@dataclass
class RunResult:
    # "ok" | "error" (nonzero exit) | "timeout" (wall clock or CPU) | "output_limit" |
    # "killed" (SIGKILL from the kernel: memory cgroup OOM) | "sandbox_error" (setup failed)
    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall: float
    value: object = None  # function-call mode: the decoded return value
    has_value: bool = False  # function-call mode: True iff a return value was printed

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ----------------------------------------------------------------------------------------------
# The bootstrap: runs as root in the child, isolates itself, drops privileges, runs the program.
# Kept as a string so the child needs nothing but the stdlib (no import of this module).
_BOOTSTRAP = r"""
import os, sys, marshal, resource   # no json/traceback here: their imports cost ~13 ms a run
def _fail(msg):
    os.write(2, ("sandbox-bootstrap-error: " + msg + "\n").encode()); os._exit(120)
with os.fdopen(int(sys.argv[1]), "rb") as f:   # config, program and call args; closed before user code
    cfg = marshal.loads(f.read())
job = cfg.pop("job")
if cfg["ns"] or cfg["uid"] is not None or cfg["seccomp"]:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    def _c(name, r):
        if r != 0: _fail("%s: %s" % (name, os.strerror(ctypes.get_errno())))
for cg in cfg["cgroups"]:   # join the slot's memory/pids cgroups while still root
    try:
        with open(cg, "w") as f: f.write(str(os.getpid()))
    except OSError:
        pass   # best effort (e.g. cgroup v2's no-internal-process rule): the rlimits below still hold
if cfg["uid"] is not None:
    # A root parent stays outside, reaps, cleans up and passes the exit status on.
    if cfg["ns"]:
        # NEWNET | NEWNS | NEWIPC | NEWUTS | NEWPID. The PID namespace applies to our children: the
        # forked child is its init, and when it dies the kernel kills and reaps everything inside.
        _c("unshare", libc.unshare(0x40000000 | 0x00020000 | 0x08000000 | 0x04000000 | 0x20000000))
    else:
        _c("subreaper", libc.prctl(36, 1, 0, 0, 0))  # PR_SET_CHILD_SUBREAPER: orphans come to us, not init
    pid = os.fork()
    if pid:
        st = 0
        while True:
            try:
                p, s = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if p == pid:
                st = s
                if not cfg["ns"] and os.fork() == 0:   # sweep leftovers (setsid'ed sleepers...) as the slot uid
                    try:
                        os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"]); os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
                        os.kill(-1, 9)   # every process of this uid but ourselves, atomically w.r.t. fork
                    finally:
                        os._exit(0)
        if os.WIFSIGNALED(st):
            import signal
            sig = os.WTERMSIG(st)
            if sig not in (signal.SIGKILL, signal.SIGSTOP): signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        os._exit(os.waitstatus_to_exitcode(st) & 255)
def _fresh_root():
    # A fresh root: an empty tmpfs holding only the allowlist, then pivot_root into it, so nothing
    # of the host's tree is left in this mount namespace (not even beneath, as with chroot).
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 1 << 14, 1 << 18
    RO = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
    _c("mount private /", libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None))
    src = [os.open(p, os.O_PATH) for p in cfg["binds"]]   # opened before /tmp is covered: a venv may live there
    _c("mount new root", libc.mount(b"tmpfs", b"/tmp", b"tmpfs", MS_NOSUID, b"size=256k,mode=755"))
    os.chdir("/tmp")   # the new root, built with relative paths
    for p, fd in zip(cfg["binds"], src):   # the interpreter, its stdlib, the shared libraries: read-only
        os.makedirs("." + p)
        _c("bind " + p, libc.mount(b"/proc/self/fd/%d" % fd, ("." + p).encode(), None, MS_BIND, None))
        _c("bind ro " + p, libc.mount(None, ("." + p).encode(), None, RO, None))
        os.close(fd)
    for link, target in cfg["links"]:   # the host's /lib64 -> usr/lib64, /dev/stdin -> /proc/self/fd/0 ...
        os.makedirs(os.path.dirname("." + link), exist_ok=True)
        os.symlink(target, "." + link)
    os.makedirs("dev", exist_ok=True)
    for name, minor in (("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)):   # character devices 1:n
        os.mknod("dev/" + name, 0o20666, os.makedev(1, minor)); os.chmod("dev/" + name, 0o666)
    os.mkdir("proc"); os.mkdir("tmp")
    # /proc of the new PID namespace: only this run's processes; subset=pid (Linux 5.8+) also
    # leaves out the system-wide files (/proc/keys, /proc/sys, /proc/mounts...)
    PROC = MS_NOSUID | MS_NODEV | MS_NOEXEC
    if libc.mount(b"proc", b"proc", b"proc", PROC, b"subset=pid") != 0:
        _c("mount /proc", libc.mount(b"proc", b"proc", b"proc", PROC, None))
    work = "size=%d,mode=700,uid=%d,gid=%d" % (cfg["tmpfs_bytes"], cfg["uid"], cfg["uid"])
    _c("mount /tmp", libc.mount(b"tmpfs", b"tmp", b"tmpfs", MS_NOSUID | MS_NODEV, work.encode()))
    _c("new root ro", libc.mount(None, b".", None, RO, None))
    _c("hostname", libc.sethostname(b"sandbox", 7))   # the UTS namespace starts with the host's name
    _c("pivot_root", libc.syscall(cfg["pivot_root"], b".", b"."))   # pivot_root(".", ".") then detach the old root
    _c("detach old root", libc.umount2(b".", 2))   # MNT_DETACH
if cfg["ns"]:
    try:
        _fresh_root()
    except OSError as e:   # a mkdir, symlink or mknod refused
        _fail("fresh root: %s" % e)
    sys.executable = cfg["executable"]   # the interpreter's real path, inside the bound installation (a venv's is not there)
L = cfg["limits"]
for name, value in (("RLIMIT_AS", L["memory_bytes"]), ("RLIMIT_FSIZE", L["file_bytes"]),
                    ("RLIMIT_NPROC", L["nproc"]), ("RLIMIT_NOFILE", L["nofile"]), ("RLIMIT_CORE", 0)):
    resource.setrlimit(getattr(resource, name), (value, value))
# soft < hard: SIGXCPU first (reported as timeout), SIGKILL one second later
resource.setrlimit(resource.RLIMIT_CPU, (L["cpu_seconds"], L["cpu_seconds"] + 1))
os.nice(L["nice"])
os.chdir(cfg["workdir"])
if cfg["uid"] is not None:
    _c("no_new_privs", libc.prctl(38, 1, 0, 0, 0))  # PR_SET_NO_NEW_PRIVS: setuid binaries gain nothing
    os.setgroups([]); os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"]); os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
    if os.getuid() == 0 or os.geteuid() == 0: _fail("still root")
    # PR_SET_PDEATHSIG after setuid (a uid change resets it): if the root parent is killed, so are we
    _c("pdeathsig", libc.prctl(1, 9, 0, 0, 0))
if cfg["seccomp"]:
    # The classic-BPF filter built by _seccomp_filter(): EPERM for the kernel keyring syscalls. It is
    # inherited by every child and across exec, and cannot be removed.
    import struct
    prog = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in cfg["seccomp"]))
    fprog = ctypes.create_string_buffer(struct.pack("HP", len(cfg["seccomp"]), ctypes.addressof(prog)))
    _c("no_new_privs", libc.prctl(38, 1, 0, 0, 0))   # lets an unprivileged process install a filter too
    _c("seccomp", libc.prctl(22, 2, fprog, 0, 0))   # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
del cfg, L
# ---- from here on: untrusted code -----------------------------------------------------------
import types
sys.argv = ["solution.py"]
mod = types.ModuleType("__main__"); mod.__file__ = "solution.py"
sys.modules["__main__"] = mod
try:
    exec(compile(job["code"], "solution.py", "exec"), mod.__dict__)
    if job["fn_name"] is not None:
        fn = mod.__dict__.get(job["fn_name"])
        if fn is None and isinstance(mod.__dict__.get("Solution"), type):  # LeetCode / LiveCodeBench style
            fn = getattr(mod.__dict__["Solution"](), job["fn_name"], None)
        if fn is None: raise NameError("function %r not defined" % job["fn_name"])
        out = fn(*job["args"])
        import json
        sys.stdout.flush()
        sys.stdout.write("\n" + job["marker"] + json.dumps(out, default=repr) + "\n")
except SystemExit as e:
    if e.code not in (None, 0): raise
except BaseException:
    import traceback; traceback.print_exc(); sys.stdout.flush(); sys.stderr.flush(); os._exit(1)
"""


# ----------------------------------------------------------------------------------------------
# What this machine allows (probed once, lazily: probing starts a process).
_probe_lock = threading.Lock()
_isolation: dict | None = None


def isolation() -> dict:
    """Which defences are active here: {'drop_uid', 'namespaces', 'seccomp', 'cgroups', 'allowlist', 'notes'}.

    namespaces: new network, mount, IPC, UTS and PID namespaces with the fresh root (allowlist:
    the directories bound read-only into it); seccomp: the key syscalls are refused. Each is
    checked by running the real bootstrap once, not assumed.
    """
    global _isolation
    with _probe_lock:
        if _isolation is None:
            _isolation = _probe()
            for note in _isolation["notes"]:
                warnings.warn("sandbox: " + note, RuntimeWarning, stacklevel=3)
        return _isolation


def _probe() -> dict:
    notes = []
    linux = sys.platform.startswith("linux")
    root = linux and os.geteuid() == 0
    arch = _ARCH.get(os.uname().machine) if linux else None
    plan = _fresh_root() if root and arch else None
    sec = arch is not None
    if linux and not arch:
        notes.append(f"no syscall table for {os.uname().machine}: no seccomp filter (kernel keyrings are shared "
                     "between runs) and no fresh root.")
    if not root:
        notes.append("not running as root on Linux: no uid drop, no namespaces, no fresh root; the child shares our "
                     "uid (can signal us, write our files), sees our files and has the network. Use a container/VM.")
    elif plan is None and arch:
        notes.append("the interpreter lives under /tmp, /proc or /dev, which the fresh root replaces: no namespaces.")
    uid = _slots.acquire({"drop_uid": root}, Limits())
    try:
        err = _trial(plan, sec, uid)
        if err and plan and sec and not _trial(plan, False, uid):
            sec = False
            notes.append(f"seccomp filter refused ({err}): kernel keyrings are shared between runs, and user "
                         "namespaces can be created.")
        elif err and plan:
            plan = None
            notes.append(f"fresh root in new namespaces failed ({err}): the child has the network and sees every "
                         "world-readable host file; host /tmp and /dev/shm are writable to it.")
            err = sec and _trial(None, sec, uid)
        if err and sec:
            sec = False
            notes.append(f"seccomp filter refused ({err}): kernel keyrings are shared between runs, and user "
                         "namespaces can be created.")
    finally:
        _slots.release(uid)
    cg = _cgroup_roots() if USE_CGROUPS and root else None
    return {"drop_uid": root, "namespaces": plan is not None, "seccomp": sec, "cgroups": cg,
            "allowlist": plan["binds"] if plan else None, "notes": notes, "_root": plan}


def _trial(plan: dict | None, sec: bool, uid: int | None) -> str:
    """Run the real bootstrap once with these defences; '' if it worked, else what went wrong."""
    iso = {"namespaces": plan is not None, "seccomp": sec, "cgroups": None, "_root": plan}
    r = _execute(iso, uid, "import os; print(sorted(os.listdir('/')))", "", None, None, Limits(timeout=10.0))
    if r.status != "ok":
        return (r.stderr.strip().splitlines() or [r.status])[-1]
    if plan is not None:  # the root holds the allowlist and nothing else
        want = {"dev", "proc", "tmp"} | {p.split("/")[1] for p in plan["binds"] + [link for link, _ in plan["links"]]}
        if r.stdout != f"{sorted(want)}\n":
            return f"the new root shows {r.stdout.strip()}, expected {sorted(want)}"
    return ""


def _fresh_root() -> dict | None:
    """The allowlist of the fresh root: {'binds': directories bind-mounted read-only, 'links': [(path, target)]}.

    binds: the real path of sys.base_prefix (the interpreter, libpython, the stdlib and
      lib-dynload) and the directories of the dynamic loader and of libc (the distribution's
      shared libraries, e.g. /usr/lib/x86_64-linux-gnu, where lib-dynload's libssl, libffi, libz...
      are found too). A virtual environment is NOT bound, nor is its path shown: with `-S` its
      site-packages is never on sys.path, and inside, sys.executable becomes the interpreter's
      real path in the bound installation, so subprocess and multiprocessing's spawn still find
      it. (A venv inside the checkout would otherwise name the checkout's path in the new root.)
    links: every symlink met on the way to the ELF interpreter (the host's /lib64 -> usr/lib64),
      so it resolves as on the host; /dev/fd, /dev/stdin|stdout|stderr -> /proc/self/fd/..., and
      /dev/shm -> /tmp (POSIX semaphores).
    None when the installation lives where the fresh root puts its own /tmp, /proc or /dev; links
    there are dropped.
    """
    libs = set()
    with open("/proc/self/maps") as f:  # where this process's libc actually came from
        for line in f:
            path = line.split(None, 5)[-1].strip()
            if os.path.basename(path).startswith(("libc.so", "libc-")):
                libs.add(os.path.dirname(path))
    interp = _elf_interp(os.path.realpath(sys.executable))
    links: dict[str, str] = {}
    libs.add(os.path.dirname(os.path.realpath(sys.executable)))   # no link on the way: the venv's path stays hidden
    if interp:
        libs.add(os.path.dirname(_resolve(interp, links)))
    binds = []
    for d in sorted({os.path.realpath(sys.base_prefix)} | {os.path.realpath(d) for d in libs}):
        if not any(d == b or d.startswith(b + "/") for b in binds):  # sorted: a parent comes before its children
            binds.append(d)
    if any(_under(b, _RESERVED) for b in binds):
        return None
    links = {k: v for k, v in links.items() if not _under(k, tuple(binds) + _RESERVED)}  # inside a bind: there already
    links.update({"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1",
                  "/dev/stderr": "/proc/self/fd/2", "/dev/shm": "/tmp"})
    return {"binds": binds, "links": sorted(links.items())}


def _under(path: str, dirs: tuple) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def _resolve(path: str, links: dict, hops: int = 0) -> str:
    """Resolve `path` one component at a time, recording each symlink met (path -> target) in `links`."""
    done = "/"
    parts = [c for c in path.split("/") if c not in ("", ".")]
    for i, part in enumerate(parts):
        if part == "..":
            done = os.path.dirname(done)
            continue
        cur = os.path.join(done, part)
        if os.path.islink(cur) and hops < 40:
            links[cur] = os.readlink(cur)
            return _resolve(os.path.join(done, links[cur], *parts[i + 1:]), links, hops + 1)
        done = cur
    return done


def _elf_interp(path: str) -> str | None:
    """PT_INTERP of a 64-bit ELF executable (e.g. /lib64/ld-linux-x86-64.so.2); None for anything else."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:  # ELFCLASS64
                return None
            e = "<" if head[5] == 1 else ">"
            phoff, = struct.unpack_from(e + "Q", head, 0x20)
            phentsize, phnum = struct.unpack_from(e + "HH", head, 0x36)
            for i in range(phnum):
                f.seek(phoff + i * phentsize)
                ph = f.read(phentsize)
                if struct.unpack_from(e + "I", ph, 0)[0] == 3:  # PT_INTERP
                    f.seek(struct.unpack_from(e + "Q", ph, 8)[0])
                    return f.read(struct.unpack_from(e + "Q", ph, 0x20)[0]).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        pass
    return None


def _seccomp_filter(user_namespaces: bool = True) -> list[tuple[int, int, int, int]] | None:
    """Classic BPF (struct sock_filter: code, jt, jf, k): EPERM for the kernel keyring calls (add_key, request_key,
    keyctl), for setns, and for unshare / clone with CLONE_NEWUSER in their flags; ENOSYS for clone3.

    EPERM, as Docker's default profile answers for the key calls. User namespaces: a new one gives the program every
    capability inside it, and with them the kernel code behind most container escapes of recent years (mount
    types, netfilter, io paths reachable only with CAP_SYS_ADMIN / CAP_NET_ADMIN), so creating one is refused:
    unshare(2) and clone(2) have their flags in the first argument, which the filter reads (the low 32 bits, where
    CLONE_NEWUSER is). clone3(2) passes its flags in a struct in memory, which seccomp cannot read: it gets ENOSYS,
    as in Docker's and systemd's profiles, and the C library then falls back to clone(2) for threads and fork
    (glibc 2.34+ tries clone3 first). setns(2) is refused outright (joining a namespace; nothing here needs it).
    Syscalls of another ABI (i386's int 0x80 on x86-64, which numbers them differently) and x32 numbers
    (>= 0x40000000) get EPERM too, so the filter cannot be sidestepped through another syscall table.
    user_namespaces=False: the key calls only (the filter before user namespaces were refused; for
    bench/sandbox_speed.py, which times both).
    """
    arch = _ARCH.get(os.uname().machine)
    if arch is None:
        return None
    audit_arch, key_calls, _, (clone, clone3, unshare, setns) = arch
    LD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_{JEQ,JGE,JSET}|BPF_K, BPF_RET
    ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | errno
    # Written with labels, resolved to the forward offsets BPF jumps take (jt / jf: instructions skipped).
    prog = [(LD_ABS, 0, 0, 4),  # A = seccomp_data.arch
            (JEQ, 1, 0, audit_arch),
            (RET, 0, 0, EPERM),
            (LD_ABS, 0, 0, 0)]  # A = seccomp_data.nr
    prog += [(JGE, "eperm", 0, 0x40000000)] + [(JEQ, "eperm", 0, nr) for nr in key_calls]
    if user_namespaces:
        prog += [(JEQ, "eperm", 0, setns), (JEQ, "enosys", 0, clone3), (JEQ, "flags", 0, unshare),
                 (JEQ, "flags", 0, clone), (RET, 0, 0, ALLOW)]
        labels = {"flags": len(prog), "enosys": len(prog) + 3, "eperm": len(prog) + 4}
        prog += [(LD_ABS, 0, 0, 16),  # flags: A = the low 32 bits of seccomp_data.args[0] (unshare's and clone's flags)
                 (JSET, "eperm", 0, CLONE_NEWUSER),
                 (RET, 0, 0, ALLOW),
                 (RET, 0, 0, ENOSYS)]  # enosys
    else:
        prog += [(RET, 0, 0, ALLOW)]
        labels = {"eperm": len(prog)}
    prog += [(RET, 0, 0, EPERM)]  # eperm
    return [(op, labels[jt] - i - 1 if isinstance(jt, str) else jt, jf, k) for i, (op, jt, jf, k) in enumerate(prog)]


def _cgroup_roots() -> dict | None:
    """Directories under which we may create per-slot cgroups: {'memory': dir, 'pids': dir} or None.

    cgroup v1 (separate hierarchies) and v2 (one unified hierarchy with the controllers enabled
    in cgroup.subtree_control) are both handled; anything not writable is skipped.
    """
    roots = {}
    try:
        lines = open("/proc/self/cgroup").read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for ctrl in ("memory", "pids"):
            if ctrl in controllers.split(","):
                d = f"/sys/fs/cgroup/{ctrl}{path}"
                if os.access(d, os.W_OK):
                    roots[ctrl] = (d, 1)
        if controllers == "" and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):  # pure v2
            d = "/sys/fs/cgroup" + path
            try:
                enabled = open(os.path.join(d, "cgroup.subtree_control")).read().split()
            except OSError:
                enabled = []
            for ctrl in ("memory", "pids"):
                if ctrl in enabled and os.access(d, os.W_OK) and ctrl not in roots:
                    roots[ctrl] = (d, 2)
    return roots or None


# ----------------------------------------------------------------------------------------------
# Slots: one uid (and cgroup) per concurrent run, so runs cannot signal or starve each other.
class _Slots:
    """Slot uids are claimed with an flock held for the life of this process, so two trainers
    (or pytest and a trainer) on one machine never share a uid and never kill each other's runs."""

    def __init__(self):
        self._free: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._made = 0
        self._next_uid = SLOT_UID_BASE
        self._lock_files = []

    def acquire(self, iso: dict, limits: Limits) -> int | None:
        """A free slot uid (None when uids cannot be dropped: runs then share our uid)."""
        if not iso["drop_uid"]:
            return None
        with self._lock:
            if self._free.empty() and self._made < MAX_SLOTS:
                uid = self._claim_uid()
                _kill_uid(uid)  # leftovers of a previous process that died mid-run
                self._made += 1
                self._free.put(uid)
        return self._free.get()

    def _claim_uid(self) -> int:
        os.makedirs(SLOT_LOCK_DIR, mode=0o700, exist_ok=True)
        while self._next_uid < SLOT_UID_BASE + SLOT_UID_COUNT:
            uid, self._next_uid = self._next_uid, self._next_uid + 1
            f = open(os.path.join(SLOT_LOCK_DIR, f"{uid}.lock"), "w")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue  # another process owns this uid
            self._lock_files.append(f)
            return uid
        raise RuntimeError(f"sandbox: all {SLOT_UID_COUNT} slot uids from {SLOT_UID_BASE} are in use")

    def release(self, uid: int | None) -> None:
        if uid is not None:
            self._free.put(uid)


_slots = _Slots()


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: kill(-1) as that uid hits all of them (and nothing else)."""
    subprocess.run([_KILL, "-KILL", "-1"], user=uid, group=uid, extra_groups=[], env=_ENV,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)


def _slot_cgroups(iso: dict, uid: int, limits: Limits) -> list[str]:
    """Create/refresh the slot's cgroups and return the cgroup.procs files the child must join."""
    procs = []
    for ctrl, (root, version) in (iso["cgroups"] or {}).items():
        d = os.path.join(root, f"grpo-sandbox-{uid}")
        try:
            os.makedirs(d, exist_ok=True)
            if ctrl == "pids":
                _write(os.path.join(d, "pids.max"), str(limits.nproc + 1))  # + the root bootstrap
            elif version == 1:  # memory: processes + tmpfs pages share this budget
                _write(os.path.join(d, "memory.limit_in_bytes"), str(limits.memory_bytes + limits.tmpfs_bytes))
            else:
                _write(os.path.join(d, "memory.max"), str(limits.memory_bytes + limits.tmpfs_bytes))
                _write(os.path.join(d, "memory.swap.max"), "0")
            procs.append(os.path.join(d, "cgroup.procs"))
        except OSError:
            continue  # best effort: rlimits still apply
    return procs


def _write(path: str, text: str) -> None:
    if os.path.exists(path):  # e.g. memory.swap.max is absent without swap accounting
        with open(path, "w") as f:
            f.write(text)


def cleanup_cgroups() -> None:
    """Remove the per-slot cgroups this process owns (they are empty between runs). Optional:
    they are reused by whoever claims the uid next."""
    iso = _isolation
    if not iso or not iso["cgroups"]:
        return
    for root, _ in iso["cgroups"].values():
        for f in _slots._lock_files:
            uid = os.path.basename(f.name).split(".")[0]
            try:
                os.rmdir(os.path.join(root, f"grpo-sandbox-{uid}"))
            except OSError:
                pass


atexit.register(cleanup_cgroups)


# ----------------------------------------------------------------------------------------------
def run_python(code: str, stdin: str = "", *, fn_name: str | None = None, args: list | None = None,
               limits: Limits = Limits()) -> RunResult:
    """Run `code` in the sandbox.

    stdin mode (fn_name None): `stdin` is the program's standard input; judge `result.stdout`.
    function-call mode: after running the module, call `fn_name(*args)` (a top-level function,
    or a method of a `Solution` class as in LeetCode/LiveCodeBench); judge `result.value`.
    """
    iso = isolation()
    uid = _slots.acquire(iso, limits)
    try:
        return _execute(iso, uid, code, stdin, fn_name, args, limits)
    finally:
        _slots.release(uid)


def _execute(iso: dict, uid: int | None, code: str, stdin: str, fn_name: str | None, args: list | None,
             limits: Limits) -> RunResult:
    t0 = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="grpo-sandbox-")  # root-only (0700): job + stdin files
    workdir = "/tmp" if iso["namespaces"] else os.path.join(scratch, "work")
    proc = None
    try:
        job_path, in_path = os.path.join(scratch, "job"), os.path.join(scratch, "stdin")
        with open(in_path, "w") as f:
            f.write(stdin)
        if not iso["namespaces"]:  # host working directory, owned by the slot uid
            os.mkdir(workdir, 0o700)
            if uid is not None:
                os.chmod(scratch, 0o711)  # the slot uid may traverse to its workdir, not list ours
                os.chown(workdir, uid, uid)
        plan = iso["_root"] if iso["namespaces"] else None
        cfg = {"ns": plan is not None, "uid": uid, "workdir": workdir, "tmpfs_bytes": limits.tmpfs_bytes,
               "binds": plan and plan["binds"], "links": plan and plan["links"],
               "executable": os.path.realpath(sys.executable),
               "pivot_root": _ARCH[os.uname().machine][2] if plan else None,
               "seccomp": _seccomp_filter() if iso["seccomp"] else None, "limits": _limit_dict(limits),
               "cgroups": _slot_cgroups(iso, uid, limits) if uid is not None else [],
               "job": {"code": code, "fn_name": fn_name, "args": list(args or []), "marker": RESULT_MARKER}}
        with open(job_path, "wb") as f:
            f.write(marshal.dumps(cfg))  # parent -> child only: the child never sends us marshal data
        job_fd = os.open(job_path, os.O_RDONLY)
        try:
            with open(in_path, "rb") as fin:
                proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _BOOTSTRAP, str(job_fd)],
                                        stdin=fin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env=_ENV, cwd="/", start_new_session=True, pass_fds=(job_fd,))
        finally:
            os.close(job_fd)
        status, out, err = _collect(proc, uid, limits, t0)
    finally:
        if proc is not None:
            _kill_all(proc, uid)
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
        shutil.rmtree(scratch, ignore_errors=True)
    rc = proc.returncode
    if status == "ok":
        if rc == 0:
            pass
        elif rc in (-24, -9):
            # The sandboxed program is the init of its PID namespace, which ignores SIGXCPU, so
            # RLIMIT_CPU shows up as the hard limit's SIGKILL; any other SIGKILL we did not send
            # comes from the memory cgroup's OOM killer.
            cpu = _limit_dict(limits)["cpu_seconds"]
            status = "timeout" if rc == -24 or time.monotonic() - t0 >= cpu else "killed"
        elif rc == 120 and err.startswith(BOOTSTRAP_ERROR):
            status = "sandbox_error"
        else:
            status = "error"
    res = RunResult(status, rc, out, err, time.monotonic() - t0)
    if fn_name is not None and status == "ok":
        _parse_value(res)
    return res


def _limit_dict(limits: Limits) -> dict:
    d = dict(limits.__dict__)
    d["cpu_seconds"] = limits.cpu_seconds or math.ceil(limits.timeout) + 1
    return d


def _collect(proc: subprocess.Popen, uid: int | None, limits: Limits, t0: float) -> tuple[str, str, str]:
    """Read stdout/stderr until EOF, the deadline or the stdout cap. Returns (status, out, err)."""
    deadline = t0 + limits.timeout
    caps = {proc.stdout: limits.stdout_bytes, proc.stderr: limits.stderr_bytes}
    bufs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    status, swept = "ok", False
    with selectors.DefaultSelector() as sel:
        for pipe in bufs:
            sel.register(pipe, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                status = "timeout"
                break
            events = sel.select(min(remaining, 0.1))
            for key, _ in events:
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf, cap = bufs[key.fileobj], caps[key.fileobj]
                if key.fileobj is proc.stdout and len(buf) + len(chunk) > cap:
                    status = "output_limit"
                buf += chunk[: cap - len(buf)]  # stderr beyond its cap is drained and dropped
            if status != "ok":
                break
            if not events and proc.poll() is not None and not swept:
                # main process gone but a pipe is still open: a detached grandchild holds it
                _kill_all(proc, uid)
                swept = True
        if status == "ok":
            try:
                proc.wait(max(deadline - time.monotonic(), 0.001))
            except subprocess.TimeoutExpired:
                status = "timeout"
    out = bytes(bufs[proc.stdout][: limits.stdout_bytes]).decode("utf-8", "replace")
    err = bytes(bufs[proc.stderr][: limits.stderr_bytes]).decode("utf-8", "replace")
    return status, out, err


def _kill_all(proc: subprocess.Popen, uid: int | None) -> None:
    """Kill the run's processes; afterwards none of them is left, not even as a zombie."""
    if uid is not None and proc.poll() is None:
        # (A bootstrap that has exited has reaped everything of this uid: the PID namespace's
        # init and all inside it, or without namespaces every orphan, as their subreaper.)
        # Kill the sandboxed processes first (also those that left our process group with
        # setsid()); the root bootstrap then reaps its child and exits by itself. Killing the
        # bootstrap first would orphan the child to the host's init, whose zombies would still
        # count against the slot's RLIMIT_NPROC in the next run.
        _kill_uid(uid)
        try:
            proc.wait(1.0)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, 9)  # the session/process group we created
    except (ProcessLookupError, PermissionError):
        pass


def _parse_value(res: RunResult) -> None:
    for line in reversed(res.stdout.split("\n")):  # not splitlines(): it splits on the \x1e marker too
        if line.startswith(RESULT_MARKER):
            try:
                res.value, res.has_value = json.loads(line[len(RESULT_MARKER):]), True
            except ValueError:
                pass
            return


# ----------------------------------------------------------------------------------------------
@dataclass
class Job:
    """One sandboxed execution, for `run_many`."""

    code: str
    stdin: str = ""
    fn_name: str | None = None
    args: list = field(default_factory=list)
    limits: Limits = Limits()


def run_many(jobs: list[Job], workers: int | None = None) -> list[RunResult]:
    """Run jobs in parallel (threads driving sandboxed subprocesses). Order is preserved.

    One hostile job cannot starve the others for long: each has its own uid, CPU rlimit, wall
    timeout, memory/pids cgroup and a raised nice value.
    """
    workers = workers or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=min(workers, MAX_SLOTS)) as pool:
        return list(pool.map(lambda j: run_python(j.code, j.stdin, fn_name=j.fn_name, args=j.args,
                                                  limits=j.limits), jobs))


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in isolation().items() if not k.startswith("_")}, indent=1, default=str))
    r = run_python("import os; print(os.getuid(), os.getcwd(), sorted(os.environ))")
    print(r)
