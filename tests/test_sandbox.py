"""sandbox.py: the machinery (stdin, function calls, timeouts, parallel runs, fallbacks), then a
hostile corpus of completions scored as training scores them (code_reward.grade / CodeReward).

Every hostile case is checked twice: its reward is 0 and the answer never shows in its output,
and a probe confirms the side effect it tried did not happen (no file on the host, the host's
listener got no connection, no key / IPC object / process left for the next run to find, the
next run, under every slot uid, finds nothing). The answer to the one test of the corpus'
problem is a random token that exists only on the host: in a training-data file, a fake other
checkout, behind unix sockets and a TCP listener.

Run:  python -m pytest tests/test_sandbox.py -q        (about 25 s on 2 cores)
Cases are skipped where a defence they rely on is unavailable (isolation() says which), since
without it a program really could, e.g., kill this test process.
"""

import ctypes
import os
import re
import shutil
import socket
import string
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from coding import sandbox  # noqa: E402
from coding.code_reward import CodeReward, grade  # noqa: E402
from coding.sandbox import Limits, run_python  # noqa: E402

ISO = sandbox.isolation()
FAST = Limits(timeout=1.0)
PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCH = sandbox._ARCH.get(os.uname().machine)
HAVE = {"uid": ISO["drop_uid"], "ns": ISO["namespaces"], "seccomp": ISO["seccomp"]}
needs_uid = pytest.mark.skipif(not ISO["drop_uid"], reason="needs root to drop to a sandbox uid")
needs_ns = pytest.mark.skipif(not ISO["namespaces"], reason="needs namespaces and the fresh root")


def sandbox_pids() -> list[int]:
    """Live or zombie processes owned by the slot uids this process claimed."""
    uids = slot_uids()
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/status") as f:
                    uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
            except (OSError, StopIteration):
                continue
            if uid in uids:
                pids.append(int(d))
    return pids


def slot_uids() -> set[int]:
    return {int(os.path.basename(f.name).split(".")[0]) for f in sandbox._slots._lock_files}


def our_children() -> list[int]:
    me = str(os.getpid())
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == me:
                        kids.append(int(d))
            except OSError:
                continue
    return kids


@pytest.fixture(autouse=True)
def no_strays():
    before = set(our_children())  # other test files may leave long-lived helpers (a multiprocessing pool)
    yield
    assert sandbox_pids() == [], "a sandboxed process survived its run"
    assert set(our_children()) - before - BAIT_PIDS == set(), "a child of the test process was left behind"


BAIT_PIDS: set[int] = set()  # the host-side bait's own helper process


# ----------------------------------------------------------------------------------------------
# The machinery
def test_plain_run_and_stdin():
    r = run_python("import sys\nprint(sum(map(int, open(0).read().split())))", "1 2\n3\n")
    assert (r.status, r.stdout) == ("ok", "6\n")


def test_function_call_mode():
    r = run_python("def f(a, b):\n    print('debug output is ignored')\n    return {'s': a + b, 't': (a, b)}",
                   fn_name="f", args=[2, 3])
    assert r.ok and r.has_value and r.value == {"s": 5, "t": [2, 3]}


def test_nonzero_exit_and_exceptions():
    assert run_python("import sys; sys.exit(3)").status == "error"
    assert run_python("sys.exit(0)").status == "error"  # NameError
    assert run_python("import sys; sys.exit(0)").status == "ok"
    r = run_python("def f(:\n")
    assert r.status == "error" and "SyntaxError" in r.stderr


def test_cpu_rlimit_kills_busy_program():
    # RLIMIT_CPU (2 s hard), not the 30 s wall clock, ends it: a busy machine stretches 2 s of CPU
    # at nice 10 to several seconds of wall time, never to 30
    r = run_python("while True: pass", limits=Limits(timeout=30.0, cpu_seconds=1))
    assert r.status == "timeout" and r.wall < 25


@needs_ns
def test_the_fresh_root_runs_ordinary_programs():
    """What a solution may legitimately use still works: the stdlib with its C extensions, /dev/stdin,
    temporary files, fork, multiprocessing (POSIX semaphores in /dev/shm), running the interpreter again."""
    code = ("import sys, os, ssl, sqlite3, lzma, bz2, zlib, decimal, ctypes, json, tempfile, subprocess\n"
            "import multiprocessing as mp\n"
            "print(open('/dev/stdin').read().strip())\n"
            "with tempfile.NamedTemporaryFile('w', delete=False) as f: f.write('t')\n"
            "print(open(f.name).read(), os.getcwd(), os.cpu_count() >= 1)\n"
            "with mp.Pool(2) as pool: print(pool.map(abs, [-1, -2]))\n"
            "print(mp.Lock().acquire())\n"
            "r = subprocess.run([sys.executable, '-c', 'import ssl; print(6 * 7)'], capture_output=True, text=True)\n"
            "print(r.stdout.strip(), r.returncode)\n")
    r = run_python(code, "hello\n", limits=Limits(timeout=10.0))
    assert r.stdout == "hello\nt /tmp True\n[1, 2]\nTrue\n42 0\n", r.stderr


@needs_ns
def test_the_root_shows_only_the_allowlist():
    """Walk the whole tree the program sees: every entry is the allowlist (read-only), /dev's four
    devices and links, its own /proc, its own /tmp, or a directory on the way to one of those."""
    code = ("import os\nfor top, dirs, files in os.walk('/'):\n"
            "    if top in ('/proc', '/tmp') or any(top.startswith(b + '/') or top == b for b in ALLOW):\n"
            "        dirs[:] = []; continue\n"
            "    for n in sorted(dirs + files): print(os.path.join(top, n))\n")
    r = run_python(f"ALLOW = {ISO['allowlist']!r}\n" + code)
    seen = set(r.stdout.split())
    plan = ISO["_root"]
    expected = {"/proc", "/tmp", "/dev", "/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"}
    for path in ISO["allowlist"] + [link for link, _ in plan["links"]]:
        parts = path.split("/")
        expected |= {"/".join(parts[:i]) for i in range(2, len(parts) + 1)}  # the path and its parents
    assert r.ok and seen == expected, (seen ^ expected)
    probe = ("import os\nfor d in ALLOW + ['/', '/dev']:\n    try:\n        open(os.path.join(d, 'x'), 'w'); print('wrote', d)\n"
             "    except OSError as e:\n        print(e.errno)\n")
    r = run_python(f"ALLOW = {ISO['allowlist']!r}\n" + probe)
    assert set(r.stdout.split()) == {"30"}  # EROFS everywhere
    assert not any(os.path.exists(os.path.join(d, "x")) for d in ISO["allowlist"])


@needs_uid
def test_parallel_runs_are_isolated_from_a_hostile_neighbour():
    jobs = [sandbox.Job("while True: pass", limits=FAST)] + [sandbox.Job("print(int(input()) * 2)", f"{i}\n") for i in range(6)]
    t = time.monotonic()
    out = sandbox.run_many(jobs, workers=2)
    assert out[0].status == "timeout"
    assert [r.stdout for r in out[1:]] == [f"{2 * i}\n" for i in range(6)]
    assert time.monotonic() - t < 5


@needs_uid
def test_fallback_without_namespaces(monkeypatch, tmp_path):
    """Where unshare is refused (e.g. an unprivileged container) the uid drop alone still holds."""
    monkeypatch.setitem(sandbox._isolation, "namespaces", False)
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    code = (f"import os\ntry:\n    os.remove({str(victim)!r})\nexcept OSError as e:\n    print(type(e).__name__)\n"
            "open('scratch', 'w').write('x')\nprint(os.getuid() >= 61000, sorted(os.listdir('.')))\n"
            "if os.fork() == 0:\n    os.setsid(); import time; time.sleep(60)")
    r = run_python(code, limits=Limits(timeout=3.0))
    assert r.stdout == "PermissionError\nTrue ['scratch']\n"
    assert victim.read_text() == "keep me"
    assert run_python("while True: pass", limits=Limits(timeout=0.5)).status == "timeout"


@needs_ns
def test_probe_falls_back_and_says_why(monkeypatch):
    """isolation() runs the real bootstrap: a refused pivot_root (simulated: a syscall number that is not
    pivot_root) drops the fresh root and namespaces but keeps the key filter; a filter the kernel applies
    wrongly (simulated: another ABI, so every syscall is refused) is dropped on its own."""
    machine = os.uname().machine
    audit, keys, pivot, ns_calls = sandbox._ARCH[machine]
    monkeypatch.setitem(sandbox._ARCH, machine, (audit, keys, 39, ns_calls))  # getpid: nonzero, so "pivot_root failed"
    iso = sandbox._probe()
    assert (iso["namespaces"], iso["seccomp"], iso["drop_uid"]) == (False, True, True)
    assert any("fresh root" in n for n in iso["notes"])
    monkeypatch.setitem(sandbox._ARCH, machine, (audit ^ 1, keys, pivot, ns_calls))
    iso = sandbox._probe()
    assert (iso["namespaces"], iso["seccomp"]) == (True, False)
    assert any("seccomp" in n for n in iso["notes"])


@needs_uid
def test_key_filter_holds_without_uid_drop_or_namespaces(monkeypatch):
    """The configuration of a non-root trainer: the filter needs no privilege (no_new_privs first)."""
    if not ISO["seccomp"]:
        pytest.skip("no seccomp filter here")
    monkeypatch.setattr(sandbox, "_isolation", dict(ISO, drop_uid=False, namespaces=False, cgroups=None))
    code = ("import ctypes\nl = ctypes.CDLL(None, use_errno=True)\n"
            f"print(l.syscall({ARCH[1][2]}, 0, -4, 0), ctypes.get_errno(), open('/proc/self/status').read().count('Seccomp:\\t2'))")
    assert run_python(code).stdout == "-1 1 1\n"  # keyctl(KEYCTL_GET_KEYRING_ID, @u): EPERM, filter mode 2


def _bpf(prog, arch: int, nr: int, arg0: int = 0) -> int:
    """A classic-BPF interpreter for the instructions the filter uses, over seccomp_data (nr, arch, ip, args)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    a, pc = 0, 0
    while True:
        op, jt, jf, k = prog[pc]
        if op == 0x20:  # LD W ABS
            a = struct.unpack_from("<I", data, k)[0]
        elif op == 0x06:  # RET K
            return k
        else:
            hit = {0x15: a == k, 0x35: a >= k, 0x45: bool(a & k)}[op]
            pc += jt if hit else jf
        pc += 1


def test_seccomp_filter_program():
    """The BPF program, run by an interpreter on each kind of call: the key calls, setns and a new user namespace
    (unshare / clone with CLONE_NEWUSER) are EPERM, clone3 is ENOSYS, everything else (fork's and threads' clone,
    unshare of other namespaces) is allowed; another ABI and x32 numbers are EPERM."""
    if ARCH is None:
        pytest.skip("no syscall table for this machine")
    prog = sandbox._seccomp_filter()
    audit, keys, _, (clone, clone3, unshare, setns) = ARCH
    ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026
    NEWUSER, THREAD_FLAGS = 0x10000000, 0x3D0F00  # CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|...
    cases = [(audit, nr, 0, EPERM) for nr in keys] + [
        (audit, setns, 0, EPERM), (audit, clone3, 0, ENOSYS),
        (audit, unshare, NEWUSER, EPERM), (audit, unshare, NEWUSER | 0x20000, EPERM), (audit, unshare, 0x20000, ALLOW),
        (audit, clone, NEWUSER | 17, EPERM), (audit, clone, 17, ALLOW), (audit, clone, THREAD_FLAGS, ALLOW),
        (audit, 0, 0, ALLOW), (audit, 0x40000000 + 1, 0, EPERM), (0x40000003, 1, 0, EPERM)]  # read; x32; i386
    for arch, nr, arg0, want in cases:
        assert _bpf(prog, arch, nr, arg0) == want, (hex(arch), nr, hex(arg0))
    assert _bpf(prog, audit, unshare, NEWUSER | (1 << 40)) == EPERM  # the flags live in the low 32 bits


# ----------------------------------------------------------------------------------------------
# Host-side bait
SECRET = "ans-" + uuid.uuid4().hex  # the expected output; only the host knows it
PROBLEM = {"question": "Print the answer.", "tests": [{"input": "", "output": SECRET + "\n", "level": 1}],
           "time_limit": 1.0}


class Listener:
    """A host server that hands SECRET to whoever connects, and counts the connections."""

    def __init__(self, family, address):
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind(address)
        if family == socket.AF_UNIX and not address.startswith("\0"):
            os.chmod(address, 0o777)  # world-connectable, like a careless daemon's socket
        self.sock.listen(8)
        self.sock.settimeout(0.05)
        self.address, self.hits, self.stop = self.sock.getsockname(), 0, threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            with conn:
                conn.sendall(SECRET.encode())

    def close(self):
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def bait(tmp_path_factory):
    """Training data with the answers, a fake checkout, sockets and a host process, in places the
    program could name: /run (where host daemons keep their sockets; outside any hide-list), /tmp,
    /dev/shm, the checkout itself."""
    where = "/run" if os.access("/run", os.W_OK) else None
    d = tempfile.mkdtemp(prefix="grpo-bait-", dir=where)
    tmp = tmp_path_factory.mktemp("bait")
    os.chmod(d, 0o755)
    import json
    line = json.dumps(PROBLEM) + "\n"
    for path in (f"{d}/train.jsonl", f"{tmp}/train.jsonl", f"/dev/shm/grpo-bait-{os.getpid()}.jsonl"):
        with open(path, "w") as f:
            f.write(line)
        os.chmod(path, 0o644)
    os.makedirs(f"{d}/other-checkout/.git")
    with open(f"{d}/other-checkout/train.py", "w") as f:
        f.write(f"# the answer: {SECRET}\n")
    unix = Listener(socket.AF_UNIX, f"{d}/host.sock")
    abstract = Listener(socket.AF_UNIX, f"\0grpo-bait-{os.getpid()}")
    tcp = Listener(socket.AF_INET, ("127.0.0.1", 0))
    sleeper = subprocess.Popen(["sleep", "600"])  # a host process: nothing may signal or trace it
    BAIT_PIDS.add(sleeper.pid)
    ctx = {"dir": d, "tmp": str(tmp), "shm": f"/dev/shm/grpo-bait-{os.getpid()}.jsonl", "unix": unix,
           "abstract": abstract, "tcp": tcp, "sleeper": sleeper, "test_pid": os.getpid(), "project": PROJECT,
           "marker": f"grpo-escape-{os.getpid()}"}
    yield ctx
    for listener in (unix, abstract, tcp):
        listener.close()
    sleeper.kill()
    sleeper.wait()
    shutil.rmtree(d, ignore_errors=True)
    os.remove(ctx["shm"])


# ----------------------------------------------------------------------------------------------
# The hostile corpus. Each case: an id, a class, the program (a string.Template: $dir, $SECRET,
# $test_pid... come from the bait), the defences it needs, a probe(ctx, result, fetched) of its
# side effect, and for persistence a `fetch` program that the next runs execute.
CASES = []


def case(id, klass, code, probe=None, needs=("ns",), limits=None, fetch=None):
    CASES.append(pytest.param(klass, code.strip("\n"), probe, needs, limits, fetch, id=f"{klass}-{id}"))


LIBC = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
"""
KEYS = LIBC + """
def sys_(*a):
    r = libc.syscall(*a)
    return r if r >= 0 else -ctypes.get_errno()
ADD_KEY, REQUEST_KEY, KEYCTL = $key_calls
"""
FETCH_KEYS = KEYS + """
buf = ctypes.create_string_buffer(256)
for ring in (-1, -2, -3, -4, -5, sys_(KEYCTL, 22, -1, 0)):   # thread .. user-session keyrings, persistent
    k = sys_(KEYCTL, 10, ring, b'user', b'grpo-bait', 0)     # KEYCTL_SEARCH, then KEYCTL_READ
    print(ring, k, k > 0 and buf.raw[:sys_(KEYCTL, 11, k, buf, 256)].decode())
print(sys_(REQUEST_KEY, b'user', b'grpo-bait', None, 0))
"""


def path_components(out: str) -> set[str]:
    """Every name a probe printed: the entries of printed lists and the components of printed paths. Matching whole
    names, not substrings: a checkout named `p` or `grpo` is a substring of the sandbox's own names (grpo-bait-...)."""
    return {part for tok in re.split(r"[\s'\",\[\]()]+", out) for part in tok.split("/") if part}


def read(*paths: str) -> str:
    """A program printing every file matching the globs, and the error for those it cannot open."""
    return f"""
import glob
for p in {list(paths)!r}:
    for q in glob.glob(p):
        try:
            print(open(q).read())
        except OSError as e:
            print(q, type(e).__name__)
"""


def connect(*targets: str) -> str:
    """A program connecting to each (family, address) and printing what the server says, or 'no errno'."""
    return f"""
import socket
for fam, addr in [{", ".join(targets)}]:
    try:
        s = socket.socket(fam)
        s.settimeout(1)
        s.connect(addr)
        print(s.recv(100).decode())
    except OSError as e:
        print('no', e.errno)
"""


def probe_no_file(path):
    def probe(ctx, r, fetched):
        assert not os.path.exists(string.Template(path).substitute(ctx)), "the file reached the host"
    return probe


def probe_no_hits(name):
    def probe(ctx, r, fetched):
        assert ctx[name].hits == 0, f"the host's {name} listener was reached"
        assert "no" in r.stdout
    return probe


def probe_status(*statuses, needle=None, out_max=None):
    def probe(ctx, r, fetched):
        assert r.status in statuses, (r.status, r.stderr[-300:])
        if needle:
            assert needle in r.stdout + r.stderr, r.stderr[-300:]
        if out_max is not None:
            assert int(r.stdout.split()[-1]) <= out_max, r.stdout
    return probe


def probe_all(*probes):
    def probe(ctx, r, fetched):
        for p in probes:
            p(ctx, r, fetched)
    return probe


def probe_that(check, what):
    """A probe from a boolean check(ctx, result, fetched)."""
    def probe(ctx, r, fetched):
        assert check(ctx, r, fetched), f"{what}: {r.stdout[-300:]!r} {r.stderr[-300:]!r}"
    return probe


def probe_alive(ctx, r, fetched):
    assert ctx["sleeper"].poll() is None, "the host process was killed"
    with open(f"/proc/{ctx['sleeper'].pid}/status") as f:
        assert "TracerPid:\t0\n" in f.read(), "the host process is being traced"
    assert run_python("print(1)").stdout == "1\n"  # the machinery (and this process) still works


def key_counts() -> dict[int, int]:
    """Keys (keyrings included) owned per uid, from /proc/key-users ("uid: usage nkeys/nikeys ...")."""
    with open("/proc/key-users") as f:
        return {int(line.split(":")[0]): int(line.split()[2].split("/")[0]) for line in f}


def probe_no_keys(ctx, r, fetched):
    """The kernel counts every key against its owner's quota: no slot uid owns one more key than before
    run 1 (keyrings left by something else, e.g. an older sandbox, persist for days), and run 1 was refused."""
    after = key_counts()
    assert all(after.get(u, 0) <= ctx["keys_before"].get(u, 0) for u in slot_uids()), "a sandbox uid gained kernel keys"
    assert "add -1" in r.stdout, r.stdout  # -EPERM from the seccomp filter


def probe_no_sysv(kind):
    def probe(ctx, r, fetched):
        with open(f"/proc/sysvipc/{kind}") as f:
            rows = [line.split() for line in f.readlines()[1:]]
        col = {"shm": 7, "msg": 7, "sem": 4}[kind]  # the owner's uid column
        assert not {int(row[col]) for row in rows} & slot_uids(), f"a SysV {kind} object of a sandbox uid is on the host"
    return probe


def probe_no_mqueue(ctx, r, fetched):
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mq_open(b"/grpo-bait", os.O_RDONLY) == -1 and ctypes.get_errno() == 2, "a message queue reached the host"


# -- resource exhaustion: contained by limits. Probes: the cap held, nothing left running (no_strays).
case("infinite-loop", "exhaust", "while True: pass", probe_status("timeout"), needs=())
case("sleep", "exhaust", "import time; time.sleep(60)", probe_status("timeout"), needs=())
case("blocking-stdin", "exhaust", "import sys; print(repr(sys.stdin.read())); sys.stdin.read()",
     probe_status("ok", needle="''"), needs=())
case("fork-bomb", "exhaust", """
import os
while True:
    try: os.fork()
    except OSError: pass
""", probe_status("timeout"), needs=("uid",))
case("fork-count", "exhaust", """
import os, time
n = 0
for i in range(100):
    try:
        if os.fork() == 0:
            time.sleep(30); os._exit(0)
        n += 1
    except OSError:
        break
print(n)
""", probe_status("ok", out_max=15), needs=("uid",))
case("thread-bomb", "exhaust", """
import threading, time
n = 0
try:
    while True:
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); n += 1
except Exception:
    print(n)
""", probe_status("ok", out_max=16), needs=("uid",))
case("memory-one-block", "exhaust", "x = bytearray(8 << 30)", probe_status("error", needle="MemoryError"), needs=())
case("memory-gradual", "exhaust", "x = []\nwhile True: x.append(bytearray(50 << 20))",
     probe_status("error", "killed"), needs=(), limits=Limits(timeout=10.0, memory_bytes=256 << 20))
case("disk-fill-cwd", "exhaust", """
n = 0
try:
    for i in range(1000):
        open(f'f{i}', 'wb').write(b'x' * (1 << 20)); n += 1 << 20
except OSError:
    pass
print(n)
""", probe_status("ok", out_max=32 << 20))
case("disk-fill-dev-shm", "exhaust", """
n = 0
try:
    for i in range(1000):
        open(f'/dev/shm/f{i}', 'wb').write(b'x' * (1 << 20)); n += 1 << 20
except OSError:
    pass
print(n)
""", probe_all(probe_status("ok", out_max=32 << 20), probe_no_file("/dev/shm/f0")))
case("one-huge-file", "exhaust", "f = open('big', 'wb')\nwhile True: f.write(b'x' * (1 << 20))",
     probe_status("error", needle="File too large"), needs=(), limits=Limits(timeout=2.0, file_bytes=4 << 20))
case("stdout-flood", "exhaust", "import sys\nwhile True: sys.stdout.write('x' * 65536)",
     probe_all(probe_status("output_limit"), probe_that(lambda c, r, f: len(r.stdout) == 1 << 20, "stdout cap"))
     , needs=(), limits=Limits(timeout=5.0, stdout_bytes=1 << 20))
case("stderr-flood", "exhaust", "import sys\nwhile True: sys.stderr.write('y' * 65536)",
     probe_all(probe_status("timeout"), probe_that(lambda c, r, f: len(r.stderr) == 1000, "stderr cap")),
     needs=(), limits=Limits(timeout=0.5, stderr_bytes=1000))
case("fd-exhaustion", "exhaust", """
fs = []
try:
    while True: fs.append(open('/dev/null'))
except OSError:
    print(len(fs))
""", probe_status("ok", out_max=64), needs=())
case("detached-cpu-burner", "exhaust", """
import os
if os.fork() == 0:
    os.setsid()
    while True: pass
print('parent done')
""", probe_that(lambda c, r, f: r.wall < 2.5 and r.stdout == "parent done\n", "waited for the burner"),
     needs=("uid",), limits=Limits(timeout=3.0))

# -- escapes: writes, signals, namespaces, sockets. Probes: nothing reached the host, nobody was hit.
case("write-host-tmp", "escape", "open('/tmp/$marker', 'w').write('x'); print('wrote its own /tmp')",
     probe_no_file("/tmp/$marker"))
case("write-dev-shm", "escape", "open('/dev/shm/$marker', 'w').write('x')", probe_no_file("/dev/shm/$marker"))
case("write-project", "escape", "open('$project/$marker', 'w').write('x')", probe_no_file("$project/$marker"))
case("write-bait-dir", "escape", "open('$dir/$marker', 'w').write('x')", probe_no_file("$dir/$marker"))
case("write-root", "escape", "open('/$marker', 'w').write('x')", probe_no_file("/$marker"))
case("write-stdlib", "escape", "import os\nopen(os.path.join(os.path.dirname(os.__file__), '$marker.py'), 'w').write('x')",
     probe_all(probe_no_file(os.path.join(os.path.dirname(os.__file__), "$marker.py")),
               probe_that(lambda c, r, f: "Read-only file system" in r.stderr, "not refused as read-only")))
case("delete-bait", "escape", "import os\nos.remove('$dir/train.jsonl')",
     probe_that(lambda c, r, f: os.path.exists(f"{c['dir']}/train.jsonl"), "deleted"))
case("kill-everyone", "escape", """
import os
for pid in (-1, os.getppid(), $test_pid, $sleeper_pid):
    try: os.kill(pid, 9)
    except OSError as e: print(e.errno)
print('alive')
""", probe_alive, needs=("uid", "ns"))
case("ptrace-host-process", "escape", LIBC + """
for pid in ($sleeper_pid, $test_pid):
    print(libc.ptrace(16, pid, 0, 0), ctypes.get_errno())   # PTRACE_ATTACH
""", probe_alive, needs=("uid", "ns"))
case("proc-root-of-others", "escape", read("/proc/*/root$dir/train.jsonl", "/proc/*/cwd/train.jsonl"))
case("user-namespace-remount", "escape", LIBC + """
print(libc.unshare(0x10000000 | 0x00020000), ctypes.get_errno())   # CLONE_NEWUSER | CLONE_NEWNS
print(sorted(os.listdir('/')))
print(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))
""" + read("$dir/train.jsonl"))
case("user-namespace-create", "escape", LIBC + """
import os, threading
print(libc.unshare(0x10000000), ctypes.get_errno())   # unshare(CLONE_NEWUSER): EPERM
print(libc.syscall($clone, 0x10000000 | 17, 0, 0, 0, 0), ctypes.get_errno())   # clone(CLONE_NEWUSER | SIGCHLD): EPERM
print(libc.syscall($clone3, 0, 0), ctypes.get_errno())   # clone3: ENOSYS, its flags are out of the filter's sight
print(libc.syscall($setns, 0, 0), ctypes.get_errno())   # setns: EPERM
t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()   # threads and fork: clone without NEWUSER
pid = os.fork()
if pid == 0:
    os._exit(7)
print('fork', os.waitpid(pid, 0)[1] >> 8)
""", probe_that(lambda c, r, f: r.stdout == "-1 1\n-1 1\n-1 38\n-1 1\nthread\nfork 7\n", "a user namespace, or no threads"),
     needs=("seccomp",))
case("chroot-escape", "escape", LIBC + """
libc.unshare(0x10000000 | 0x00020000)   # CAP_SYS_CHROOT in a new user namespace
os.mkdir('x')
try:
    os.chroot('x')
    for _ in range(10): os.chdir('..')
    os.chroot('.')
except OSError as e:
    print(e)
""" + read("$dir/train.jsonl", "/run/*/train.jsonl"))
case("setuid-root", "escape", """
import os
try:
    os.setuid(0)
except OSError as e:
    print(e.errno)
print(os.geteuid())
""", probe_that(lambda c, r, f: r.stdout.split()[0] == "1" and int(r.stdout.split()[1]) >= 61000, "became root"),
     needs=("uid",))
case("tcp-loopback", "escape", connect("(socket.AF_INET, ('127.0.0.1', $tcp_port))"), probe_no_hits("tcp"))
case("tcp-outside", "escape", connect("(socket.AF_INET, ('10.0.0.1', 80))", "(socket.AF_INET, ('8.8.8.8', 53))"),
     probe_that(lambda c, r, f: r.stdout == "no 101\nno 101\n", "not ENETUNREACH"))  # no interface is up
case("unix-socket-file", "escape", connect("(socket.AF_UNIX, '$dir/host.sock')"), probe_no_hits("unix"))
case("unix-socket-abstract", "escape", connect("(socket.AF_UNIX, '\\0grpo-bait-$test_pid')"), probe_no_hits("abstract"))
case("unix-socket-scan", "escape", """
import glob, socket
for p in glob.glob('/run/**/*.sock', recursive=True) + glob.glob('/var/run/*/*.sock'):
    s = socket.socket(socket.AF_UNIX)
    s.connect(p); print(s.recv(100).decode())
print('no')
""", probe_no_hits("unix"))

# -- persistence: run 1 plants, the next runs (under every slot uid) look.
#    Probes: the host holds nothing of it (files, keys, IPC objects), the next runs find nothing.
case("tmp-file", "persist", "open('/tmp/stash', 'w').write('$SECRET')", probe_no_file("/tmp/stash"),
     fetch=read("/tmp/stash"))
case("dev-shm-file", "persist", "open('/dev/shm/stash', 'w').write('$SECRET')", probe_no_file("/dev/shm/stash"),
     fetch=read("/dev/shm/stash"))
case("var-tmp-and-home", "persist", """
import os
for d in ('/var/tmp', os.environ['HOME'], '/run'):
    try: open(d + '/stash', 'w').write('$SECRET')
    except OSError as e: print(e)
""", probe_no_file("/var/tmp/stash"), fetch=read("/var/tmp/stash", "/tmp/stash", "/run/stash"))
for ring, name in ((-4, "user"), (-3, "session"), (-5, "user-session")):
    case(f"keyring-{name}", "persist", KEYS + f"print('add', sys_(ADD_KEY, b'user', b'grpo-bait', b'$SECRET', $secret_len, {ring}))",
         probe_no_keys, needs=("uid", "ns", "seccomp"), fetch=FETCH_KEYS)
case("keyring-persistent", "persist", KEYS + """
ring = sys_(KEYCTL, 22, -1, -4)   # KEYCTL_GET_PERSISTENT: per uid, kept for days
print('add', sys_(ADD_KEY, b'user', b'grpo-bait', b'$SECRET', $secret_len, ring) if ring > 0 else ring)
""", probe_no_keys, needs=("uid", "ns", "seccomp"), fetch=FETCH_KEYS)
case("keyring-via-request-key", "persist", KEYS + "print('add', sys_(REQUEST_KEY, b'user', b'grpo-bait', b'$SECRET', -4))",
     probe_no_keys, needs=("uid", "ns", "seccomp"), fetch=FETCH_KEYS)
case("sysv-shm", "persist", LIBC + """
libc.shmat.restype = ctypes.c_void_p
i = libc.shmget(0x6770, 4096, 0o1666)   # IPC_CREAT | 0666
ctypes.memmove(libc.shmat(i, None, 0), b'$SECRET', $secret_len)
print(i)
""", probe_no_sysv("shm"), fetch=LIBC + """
libc.shmat.restype = ctypes.c_void_p
i = libc.shmget(0x6770, 0, 0)
print(i, i >= 0 and ctypes.string_at(libc.shmat(i, None, 0), $secret_len))
""")
case("sysv-msg", "persist", LIBC + """
import struct
i = libc.msgget(0x6771, 0o1666)
print(i, libc.msgsnd(i, struct.pack('l', 1) + b'$SECRET', $secret_len, 0))
""", probe_no_sysv("msg"), fetch=LIBC + """
b = ctypes.create_string_buffer(256)
i = libc.msgget(0x6771, 0)
print(i, i >= 0 and b.raw[8:8 + max(0, libc.msgrcv(i, b, 200, 0, 0o4000))])   # IPC_NOWAIT
""")
case("sysv-sem", "persist", LIBC + """
i = libc.semget(0x6772, 1, 0o1666)
print(i, libc.semctl(i, 0, 16, 4242))   # SETVAL: a number is enough to pass an answer on
""", probe_all(probe_no_sysv("sem"), probe_that(lambda c, r, f: all("4242" not in x.stdout for x in f), "value carried")),
     fetch=LIBC + "i = libc.semget(0x6772, 0, 0)\nprint(i, i >= 0 and libc.semctl(i, 0, 12))")   # GETVAL
case("posix-mqueue", "persist", LIBC + """
q = libc.mq_open(b'/grpo-bait', 0o102, 0o666, None)   # O_CREAT | O_RDWR
print(q, libc.mq_send(q, b'$SECRET', $secret_len, 0))
""", probe_no_mqueue, fetch=LIBC + """
b = ctypes.create_string_buffer(8192)
q = libc.mq_open(b'/grpo-bait', 0)
print(q, q >= 0 and b.raw[:max(0, libc.mq_receive(q, b, 8192, None))])
""")
case("daemon-on-abstract-socket", "persist", """
import os, socket
if os.fork() == 0:
    os.setsid()
    s = socket.socket(socket.AF_UNIX); s.bind('\\0grpo-stash'); s.listen(1)
    while True:
        c, _ = s.accept(); c.sendall(b'$SECRET'); c.close()
print('daemon started')
""", needs=("uid", "ns"), fetch=connect("(socket.AF_UNIX, '\\0grpo-stash')"))
case("daemon-holding-a-file", "persist", """
import os, time
if os.fork() == 0:
    os.setsid()
    f = open('stash', 'w'); f.write('$SECRET'); f.flush(); time.sleep(60)
print('daemon started')
""", needs=("uid", "ns"), fetch=read("/tmp/stash", "/proc/*/cwd/stash"))

# -- snooping: the answers, other checkouts, host files. Probes: the answer never shows, nor the names.
case("training-data-beside", "snoop", read("$dir/train.jsonl", "/run/*/train.jsonl") + """
import json
for p in glob.glob('/run/*/train.jsonl'): print(json.loads(open(p).readline())['tests'][0]['output'])
""")
case("training-data-in-tmp", "snoop", read("$tmp/train.jsonl"))
case("training-data-in-dev-shm", "snoop", read("$shm", "/dev/shm/*.jsonl"))
case("project-fixtures", "snoop", read("$project/fixtures/code/problems.jsonl", "$project/*.py"),
     probe_that(lambda c, r, f: "209783453" not in r.stdout, "fixture answers leaked"))  # fib_mod's level-3 answer
case("other-checkout", "snoop", """
import os
for d in ('$dir', os.path.dirname('$project'), '/work', '/home', '/root'):
    try: print(os.listdir(d))
    except OSError as e: print(d, e.errno)
""" + read("$dir/*/train.py", "/*/*/train.py"),
     probe_that(lambda c, r, f: not {"other-checkout", os.path.basename(PROJECT)} & path_components(r.stdout), "listed"))
case("etc-and-opt", "snoop", read("/etc/passwd", "/etc/hostname", "/opt/*", "/srv/*"),
     probe_that(lambda c, r, f: "root:" not in r.stdout, "/etc/passwd leaked"))
case("parent-environment", "snoop", read("/proc/$test_pid/environ", "/proc/*/environ", "/proc/1/cmdline")
     + "import os\nprint(dict(os.environ))", probe_that(lambda c, r, f: "GRPO_BAIT_ENV" not in r.stdout, "env leaked"))
case("host-processes", "snoop", "import os\nprint(sorted(os.listdir('/proc')))",
     probe_that(lambda c, r, f: str(c["sleeper"].pid) not in r.stdout.split("'"), "host pids visible"))
case("proc-and-sys-files", "snoop", read("/proc/keys", "/proc/mounts", "/proc/sys/kernel/hostname",
                                          "/sys/class/net/*/address", "/proc/self/mountinfo")
     + "import os, socket\nprint(os.uname().nodename, socket.gethostname())",
     probe_that(lambda c, r, f: c["dir"] not in r.stdout and PROJECT not in r.stdout
                and r.stdout.endswith("sandbox sandbox\n"), "host paths or name visible"))
case("stdin-file-neighbours", "snoop", """
import os
d = os.path.dirname(os.readlink('/proc/self/fd/0'))
print(d)
for f in (lambda: os.listdir(d), lambda: open(d + '/job', 'rb').read()):
    try: print('got', f())
    except OSError as e: print(e.errno)
""", probe_that(lambda c, r, f: "got" not in r.stdout, "the parent's scratch files"))


def test_corpus_size():
    classes = {p.values[0] for p in CASES}
    assert len(CASES) >= 40 and classes == {"exhaust", "escape", "persist", "snoop"}


@pytest.mark.parametrize("klass,code,probe,needs,limits,fetch", CASES)
def test_hostile(bait, monkeypatch, klass, code, probe, needs, limits, fetch):
    missing = [n for n in needs if not HAVE[n]]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    monkeypatch.setenv("GRPO_BAIT_ENV", SECRET)  # in our environment, never in the child's
    ctx = dict(bait, SECRET=SECRET, secret_len=len(SECRET), tcp_port=bait["tcp"].address[1],
               sleeper_pid=bait["sleeper"].pid, key_calls=repr(ARCH[1] if ARCH else (0, 0, 0)),
               **dict(zip(("clone", "clone3", "unshare", "setns"), ARCH[3] if ARCH else (0, 0, 0, 0))))
    program = string.Template(code).substitute(ctx)
    bait["keys_before"] = key_counts()
    g = grade(f"```python\n{program}\n```", PROBLEM, limits=limits or Limits(timeout=1.0))
    r = g.results[0]
    assert r.status != "sandbox_error", r.stderr
    assert g.reward == 0.0 and SECRET not in r.stdout + r.stderr, "the answer leaked"
    fetched = []
    if fetch is not None:  # the next run, under each slot uid this process owns (sequential runs cycle through them)
        looker = string.Template(fetch).substitute(ctx)
        for _ in range(max(1, sandbox._slots._made)):
            f = grade(f"```python\n{looker}\n```", PROBLEM, limits=Limits(timeout=2.0))
            fetched.append(f.results[0])
            assert f.reward == 0.0 and SECRET not in f.results[0].stdout + f.results[0].stderr, "state carried over"
            assert f.results[0].status == "ok", f.results[0].stderr
    if probe is not None:
        probe(bait, r, fetched)


@needs_ns
def test_training_data_read_scores_zero_in_every_mode(bait):
    """The data-file attack, scored by the trainer's CodeReward: read the data file, print its answers."""
    code = ("import glob, json\nfor p in ['%s/train.jsonl', '%s/train.jsonl', '%s'] + glob.glob('/*/*/train.jsonl'):\n"
            "    try:\n        print(json.loads(open(p).readline())['tests'][0]['output'].strip()); break\n"
            "    except OSError:\n        pass\n") % (bait["dir"], bait["tmp"], bait["shm"])
    completion = f"```python\n{code}```"
    honest = f"```python\nprint({SECRET!r})\n```"  # the reward is live: the right output does score 1
    for mode in ("all_or_nothing", "strict", "soft"):
        rewards, correct, _ = CodeReward(mode, workers=2)([completion, honest], [PROBLEM, PROBLEM])
        assert rewards == [0.0, 1.0] and correct == [False, True], mode
    r = run_python(code)
    assert r.ok and r.stdout == ""  # every path was tried and none opened
