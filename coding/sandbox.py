"""
Run untrusted Python programs (model completions) in a throwaway, resource-limited sandbox.

Used by code_reward.py for the test-case rewards of Skywork-OR1 (algorithms.md §3.7: 1 iff all
tests pass), Ring-lite (same) and MiMo (§3.3.1, test-difficulty-driven reward). Stdlib only.
This contains accidents and reward hacks of an RL policy; it is not a security boundary against
a determined attacker (no seccomp, no VM, shared kernel).

One run (`run_python`):
  1. The parent writes config + program to a root-only temp file and the test input to another,
     and starts `python -I -S -c _BOOTSTRAP <fd>` in a NEW SESSION with a scrubbed environment
     (PATH, LANG, HOME only). `-I` ignores PYTHON* variables and the user site; `-S` skips
     `site`, so only the stdlib is importable. Stdin is the input file itself, so `open(0)` works.
  2. The bootstrap, still root, joins the slot's memory + pids cgroups (where writable), enters
     new network, mount, IPC, UTS and PID namespaces (unshare(2) through ctypes: Python 3.11 has
     no os.unshare) and forks. The root parent stays outside, reaps, and relays the exit status.
     The child (init of the new PID namespace) mounts a size-capped tmpfs on /tmp as its working
     directory, a fresh /proc (it sees only its own processes), hides /var/tmp, /dev/shm,
     /run/lock, /root, /home and the project directory behind empty read-only tmpfs (bind-mounting
     the Python installation back read-only when it lives there, e.g. pyenv in /root), sets
     rlimits, raises its nice value, sets no_new_privs, and drops to a per-slot uid/gid
     (61000 + n) with no supplementary groups, then PR_SET_PDEATHSIG(SIGKILL).
  3. Only then is the program compiled and executed as `__main__` in the same interpreter. In
     function-call mode the bootstrap then calls the named function with the arguments and prints
     the JSON result after a marker on stdout.
  4. The parent reads stdout/stderr with caps and enforces the wall-clock timeout. To stop a run
     it runs `kill -KILL -1` as the slot uid (kills every process of that uid, atomically with
     respect to fork), then the session's process group. When init of a PID namespace dies the
     kernel kills and reaps everything inside, so no stray process, not even a zombie, survives.
Expected outputs never enter the sandbox: comparison happens in the parent (code_reward.py), so
a program can only score by producing the right answer.

Measured on the dev box (root, Linux 6.18, cgroup v1 writable, Python 3.11): RLIMIT_NPROC is
IGNORED for root (a root process with NPROC=5 forked 20 children), hence the uid drop; a fork
bomb, memory hog, infinite loop, writes to /tmp or the repo, reading the parent's environment,
connecting to a loopback listener, kill(getppid()/our pid/-1), deleting our files and 4 MiB+ of
output are all contained (tests/test_sandbox.py).

| threat                      | defence                                                | what remains                           |
|-----------------------------|--------------------------------------------------------|----------------------------------------|
| infinite loop, sleep        | wall timeout -> kill; RLIMIT_CPU; stdin is a finite file| none                                  |
| fork bomb                   | RLIMIT_NPROC on a per-slot uid (root ignores NPROC);   | without root: NPROC counts all our own |
|                             | pids cgroup; PID namespace torn down with its init      | processes, so a bomb just fails; no    |
|                             |                                                        | sweep of setsid'ed children            |
| memory hog                  | RLIMIT_AS per process; memory cgroup per run           | without cgroups: nproc x RLIMIT_AS     |
| disk fill, write outside cwd| cwd = private size-capped tmpfs on /tmp; host /tmp,    | without namespaces: world-writable host|
|                             | /var/tmp, /dev/shm hidden; RLIMIT_FSIZE; slot uid owns | dirs (/tmp, /dev/shm) are writable, up |
|                             | no host file                                           | to RLIMIT_FSIZE per file               |
| delete/modify project files | unprivileged uid; project dir hidden (mount namespace) | world-writable files anywhere          |
| read answers, data, keys    | project dir, /root, /home hidden; expected outputs     | other world-readable host files (/etc, |
|                             | never sent to the child                                | /usr, /opt, data outside the project)  |
| read the parent's env       | env scrubbed; own /proc (PID ns); other uid anyway     | none known                             |
| network, incl. loopback     | network namespace with no interface up: ENETUNREACH    | without namespaces: FULL network. A    |
|                             |                                                        | Python-level socket patch would not be |
|                             |                                                        | isolation, so none is pretended        |
| kill parent / other runs    | other uid -> EPERM; PID namespace hides host pids;     | without root: the child CAN signal the |
|                             | one uid per concurrent run                             | trainer (same uid)                     |
| huge output                 | stdout cap kills the run ("output_limit"); stderr      | none                                   |
|                             | truncated                                              |                                        |
| setuid binaries             | PR_SET_NO_NEW_PRIVS                                    | none known                             |
| kernel bugs, side channels  | nothing                                                | everything                             |

Fallbacks, reported once as a RuntimeWarning and by `isolation()`: not root -> no uid drop, no
namespaces, no cgroups (rlimits, session kill and timeouts only); root but unshare refused (e.g.
Docker's default profile) -> uid drop, rlimits, cgroups; the root parent is then a child
subreaper and sweeps the slot uid when the program exits, so leftovers still die and are reaped.
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
PROJECT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout (this file is in coding/)
HIDDEN_DIRS = ("/var/tmp", "/dev/shm", "/run/lock", "/root", "/home", PROJECT_DIR)
# Per-slot memory + pids cgroups give a hard total memory cap per run (otherwise the bound is
# nproc x RLIMIT_AS). Moving a process into a cgroup v1 adds ~20-50 ms of latency per run here
# (the kernel waits for an RCU grace period on attach), but it is sleep, not CPU: a parallel pool
# loses no throughput (bench/sandbox_speed.py). GRPO_SANDBOX_CGROUPS=0 turns them off.
USE_CGROUPS = os.environ.get("GRPO_SANDBOX_CGROUPS", "1") != "0"
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"}
_KILL = shutil.which("kill") or "/bin/kill"
# The interpreter and its stdlib must stay visible even when they live under a hidden dir
# (pyenv in /root, a venv in the project); they are bind-mounted back read-only.
_KEEP = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, os.path.dirname(sys.executable),
                                                os.path.dirname(os.path.realpath(sys.executable)))})


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
if cfg["ns"] or cfg["uid"] is not None:
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
if cfg["ns"]:
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 1 << 14, 1 << 18
    _c("mount private /", libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None))
    _c("mount /proc", libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None))
    keep = [(k, os.open(k, os.O_PATH)) for k in cfg["keep"]]   # e.g. the Python install under /root
    work = "size=%d,mode=700,uid=%d,gid=%d" % (cfg["tmpfs_bytes"], cfg["uid"], cfg["uid"])
    # /tmp becomes the private, size-capped working directory; the rest turn empty and read-only
    for d, opts, ro in [("/tmp", work, False)] + [(h, "size=64k,mode=755", True) for h in cfg["hide"]]:
        if not os.path.isdir(d) or os.path.islink(d):
            continue   # absent, or already under an earlier mount (e.g. a project inside /tmp)
        _c("hide " + d, libc.mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts.encode()))
        for k, fd in keep:   # punch read-only holes for what must stay visible
            if k == d or k.startswith(d.rstrip("/") + "/"):
                os.makedirs(k, exist_ok=True)
                _c("keep " + k, libc.mount(("/proc/self/fd/%d" % fd).encode(), k.encode(), None, MS_BIND | MS_REC, None))
                _c("keep ro " + k, libc.mount(None, k.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None))
        if ro:
            _c("hide ro " + d, libc.mount(None, d.encode(), None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None))
    for _, fd in keep: os.close(fd)
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
    """Which defences are active here: {'drop_uid', 'namespaces', 'cgroups', 'notes'}."""
    global _isolation
    with _probe_lock:
        if _isolation is None:
            _isolation = _probe()
            for note in _isolation["notes"]:
                warnings.warn("sandbox: " + note, RuntimeWarning, stacklevel=3)
        return _isolation


def _probe() -> dict:
    notes = []
    root = hasattr(os, "geteuid") and os.geteuid() == 0 and sys.platform.startswith("linux")
    if not root:
        notes.append("not running as root on Linux: no uid drop, no namespaces; the child shares our uid "
                     "(can signal us, write our files) and has the network. Use a container/VM for real isolation.")
        return {"drop_uid": False, "namespaces": False, "cgroups": None, "notes": notes}
    probe = ("import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); "
             "sys.exit(0 if l.unshare(0x40000000|0x00020000|0x08000000|0x04000000|0x20000000)==0 and "
             "l.mount(None,b'/',None,(1<<14)|(1<<18),None)==0 and "
             "l.mount(b'tmpfs',b'/tmp',b'tmpfs',0,b'size=4k')==0 else 1)")
    r = subprocess.run([sys.executable, "-I", "-S", "-c", probe], env=_ENV, capture_output=True)
    ns = r.returncode == 0
    if not ns:
        notes.append("unshare(CLONE_NEWNET|CLONE_NEWNS) failed: the child has the network and sees host /tmp.")
    cg = _cgroup_roots() if USE_CGROUPS else None
    return {"drop_uid": True, "namespaces": ns, "cgroups": cg, "notes": notes}


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
        cfg = {"ns": iso["namespaces"], "uid": uid, "workdir": workdir, "hide": list(HIDDEN_DIRS), "keep": _KEEP,
               "tmpfs_bytes": limits.tmpfs_bytes, "limits": _limit_dict(limits),
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
        _slots.release(uid)
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
    print(json.dumps({k: v for k, v in isolation().items()}, indent=1, default=str))
    r = run_python("import os; print(os.getuid(), os.getcwd(), sorted(os.environ))")
    print(r)
