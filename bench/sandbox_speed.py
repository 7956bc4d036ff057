"""
Sandbox throughput and per-execution overhead (sandbox.py).

Prints a table: trivial program executed in-process (exec), as a plain subprocess, as a plain
isolated subprocess (-I -S), and in the sandbox (sequential latency), then sandboxed test
executions per second with a parallel pool (threads driving sandbox processes).

Run:  python bench/sandbox_speed.py [--n 60] [--workers 2]
"""

import argparse
import os
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
    jobs = [sandbox.Job(TEST_PROGRAM, f"{i}\n") for i in range(args.n * 2)]
    sandbox.run_many(jobs[:4], workers=args.workers)
    t = time.perf_counter()
    res = sandbox.run_many(jobs, workers=args.workers)
    dt = time.perf_counter() - t
    assert all(r.ok for r in res)
    print(f"\nparallel pool, {args.workers} workers: {len(jobs)} sandboxed tests in {dt:.2f} s "
          f"= {len(jobs) / dt:.1f} tests/s")


if __name__ == "__main__":
    main()
