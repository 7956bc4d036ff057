"""
Sandbox throughput and per-execution overhead (sandbox.py).

Prints a table: trivial program executed in-process (exec), as a plain subprocess, as a plain
isolated subprocess (-I -S), and in the sandbox (sequential latency), then sandboxed test
executions per second with a parallel pool (threads driving sandbox processes).

Then, as root, what the fresh root is built from, timed one operation at a time in a throwaway
mount namespace: a read-only bind (bind + remount), a tmpfs mount, a symlink, a device node, and
a whole new mount namespace (unshare copies the host's mount table) with pivot_root and detach.

Then the seccomp filter's own cost: nanoseconds a syscall takes (getppid in a loop, in a child) with no filter, with
the key-syscall filter alone, and with the full filter (keys, setns, user namespaces, clone3), min of 5 children each.

Run:  python bench/sandbox_speed.py [--n 60] [--workers 2]
"""

import argparse
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project is one folder up

from coding import sandbox

TEST_PROGRAM = "n = int(input())\nprint(sum(range(n)))\n"  # a typical tiny stdin/stdout test


def per_call(fn, n: int) -> float:
    fn()  # warm-up (first sandbox call also probes what the machine allows)
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


# Runs as a root child: each operation repeated n times on fresh targets, microseconds per operation.
MOUNT_COSTS = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
src, n, pivot_root = sys.argv[1].encode(), int(sys.argv[2]), int(sys.argv[3])
BIND, RO, REC_PRIVATE = 4096, 32 | 4096 | 1 | 2 | 4, (1 << 14) | (1 << 18)
def once():   # in a forked child: a new mount namespace, then pivot into an empty tmpfs
    r, w = os.pipe()
    if os.fork() == 0:
        t0 = time.perf_counter()
        assert libc.unshare(0x00020000) == 0   # CLONE_NEWNS: copies the host's mount table
        t1 = time.perf_counter()
        libc.mount(None, b"/", None, REC_PRIVATE, None)
        libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, b"size=64k"); os.chdir("/tmp")
        t2 = time.perf_counter()
        assert libc.syscall(pivot_root, b".", b".") == 0 and libc.umount2(b".", 2) == 0
        os.write(w, b"%f %f" % ((t1 - t0) * 1e6, (time.perf_counter() - t2) * 1e6)); os._exit(0)
    os.close(w); out = os.read(r, 100).split(); os.close(r); os.wait()
    return [float(x) for x in out]
pairs = sorted(once() for _ in range(n // 10))
median = lambda xs: sorted(xs)[len(xs) // 2]
rows = [("new mount namespace (unshare)", median([a for a, _ in pairs])),
        ("pivot_root + detach the old root", median([b for _, b in pairs]))]
assert libc.unshare(0x00020000) == 0
assert libc.mount(None, b"/", None, REC_PRIVATE, None) == 0
assert libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, b"size=4m") == 0
os.chdir("/tmp")
for i in range(n): os.mkdir("b%d" % i); os.mkdir("t%d" % i)
def timed(op):
    t = time.perf_counter()
    for i in range(n): assert op(i) == 0, os.strerror(ctypes.get_errno())
    return (time.perf_counter() - t) / n * 1e6
rows += [("bind mount", timed(lambda i: libc.mount(src, b"b%d" % i, None, BIND, None))),
         ("read-only remount of a bind", timed(lambda i: libc.mount(None, b"b%d" % i, None, RO, None))),
         ("tmpfs mount", timed(lambda i: libc.mount(b"tmpfs", b"t%d" % i, b"tmpfs", 0, b"size=64k"))),
         ("symlink", timed(lambda i: os.symlink("/proc/self/fd", "l%d" % i) or 0)),
         ("mknod (character device)", timed(lambda i: os.mknod("d%d" % i, 0o20666, os.makedev(1, 3)) or 0))]
for name, us in rows: print("%s\t%.1f" % (name, us))
"""


def mount_costs(n: int) -> list[tuple[str, float]]:
    arch = sandbox._ARCH.get(os.uname().machine)
    r = subprocess.run([sys.executable, "-I", "-S", "-c", MOUNT_COSTS, sys.base_prefix, str(n), str(arch[2])],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"error: mount cost probe failed: {r.stderr.strip().splitlines()[-1:]}")
    return [(name, float(us)) for name, us in (line.split("\t") for line in r.stdout.splitlines())]


# Runs as a child: ns per getppid syscall, after installing the filter in argv[1] (JSON; null: none).
FILTER_COST = r"""
import ctypes, json, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
prog, n = json.loads(sys.argv[1]), int(sys.argv[2])
if prog:
    buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))
    fprog = ctypes.create_string_buffer(struct.pack("HP", len(prog), ctypes.addressof(buf)))
    assert libc.prctl(38, 1, 0, 0, 0) == 0 and libc.prctl(22, 2, fprog, 0, 0) == 0
import os
getppid = os.getppid  # one syscall per call (glibc caches nothing here)
t = time.perf_counter()
for _ in range(n):
    getppid()
print((time.perf_counter() - t) / n * 1e9)
"""


def filter_costs(n: int = 200_000, repeats: int = 5) -> list[tuple[str, float]]:
    """ns per syscall under no filter, the key filter (before) and the full filter (now): min over `repeats` children."""
    import json

    out = []
    for name, prog in [("no filter", None), ("key syscalls only", sandbox._seccomp_filter(user_namespaces=False)),
                       ("full (keys, setns, user ns, clone3)", sandbox._seccomp_filter())]:
        runs = [float(subprocess.run([sys.executable, "-c", FILTER_COST, json.dumps(prog), str(n)], check=True,
                                     capture_output=True, text=True).stdout) for _ in range(repeats)]
        out.append((f"{name} ({len(prog) if prog else 0} instructions)", min(runs)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=60, help="executions per measurement")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel pool size")
    args = ap.parse_args()
    iso = sandbox.isolation()
    code = compile("pass", "<bench>", "exec")
    rows = [
        ("in-process exec('pass')", per_call(lambda: exec(code, {}), args.n * 100)),
        ("subprocess python -c pass", per_call(lambda: subprocess.run([sys.executable, "-c", "pass"]), args.n)),
        ("subprocess python -I -S -c pass", per_call(lambda: subprocess.run([sys.executable, "-I", "-S", "-c", "pass"]), args.n)),
        ("sandbox run_python('pass')", per_call(lambda: sandbox.run_python("pass"), args.n)),
        ("sandbox stdin test (sequential)", per_call(lambda: sandbox.run_python(TEST_PROGRAM, "1000\n"), args.n)),
    ]
    base = rows[1][1]
    print(f"isolation: uid drop={iso['drop_uid']} namespaces={iso['namespaces']} "
          f"cgroups={sorted(iso['cgroups']) if iso['cgroups'] else None}; cpus={os.cpu_count()}")
    print(f"{'execution':36s} {'ms/exec':>9s} {'vs plain subprocess':>20s}")
    for name, sec in rows:
        print(f"{name:36s} {sec * 1e3:9.4f} {sec / base:19.3f}x")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for i in range(args.n):
        sandbox.run_python(TEST_PROGRAM, f"{i}\n")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / args.n
    print(f"{'CPU per sandboxed test (user+sys)':36s} {cpu * 1e3:9.4f} ms  (every process of the run, reaped)")
    jobs = [sandbox.Job(TEST_PROGRAM, f"{i}\n") for i in range(args.n * 2)]
    sandbox.run_many(jobs[:4], workers=args.workers)
    t = time.perf_counter()
    res = sandbox.run_many(jobs, workers=args.workers)
    dt = time.perf_counter() - t
    assert all(r.ok for r in res)
    print(f"\nparallel pool, {args.workers} workers: {len(jobs)} sandboxed tests in {dt:.2f} s "
          f"= {len(jobs) / dt:.1f} tests/s")
    if iso["namespaces"]:
        plan = iso["_root"]
        costs = dict(mount_costs(200))
        print(f"\nfresh root, microseconds per operation (median of 3 root children; each times 200 mounts, "
              f"links, nodes, and 20 forks for unshare / pivot_root); "
              f"this run builds it from {len(plan['binds'])} read-only binds, 2 tmpfs + /proc, "
              f"{len(plan['links'])} symlinks, 4 device nodes")
        samples = [dict(mount_costs(200)) for _ in range(2)] + [costs]
        for name in costs:
            print(f"  {name:36s} {sorted(s[name] for s in samples)[1]:8.1f} us")
    if iso["seccomp"]:
        rows = filter_costs()
        print("\nseccomp filter, ns per syscall (getppid, min of 5 children x 200k calls):")
        for name, ns in rows:
            print(f"  {name:44s} {ns:7.1f} ns  (+{ns - rows[0][1]:.1f})")


if __name__ == "__main__":
    main()
