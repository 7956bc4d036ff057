"""Worst-case wall time of one math reward call on pathological answers, and of a batch that mixes them with
honest answers: the hard time bound of reward.MathReward (a worker that overruns is killed and replaced).

Run:  python bench/reward_timeout.py [--timeout 5] [--workers 2] [--mode math]

Prints, per pathological input, the wall time of its check as the caller saw it (from handing the job to a worker
to its verdict) and whether it timed out; then one mixed batch: its wall time, the worst per-call time, and whether
every honest answer beside the pathological ones was still scored right. The bound to compare with is
timeout + 0.5 s per call.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import reward  # noqa: E402


def pathological() -> list[tuple[str, str, str]]:
    """(name, completion, gold): answers that make a checker hang or crawl."""
    matrix = "\\begin{pmatrix}" + "\\\\".join("&".join(str((i * 7 + j) % 10) for j in range(300)) for i in range(300)) + "\\end{pmatrix}"
    return [
        ("10k nested braces", "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}", "1"),
        ("1 MB of prose, boxed 3/4", "Let us think. " * 75_000 + "\\boxed{3/4}", "0.75"),
        ("1 MB single box", "\\boxed{" + "1+" * 500_000 + "1}", "500001"),
        ("1 MB of unclosed boxes", "\\boxed{" * 150_000, "1"),
        ("power tower vs tower", "\\boxed{9^{9^{9^{9}}}}", "9^{9^{9^{8}}}"),
        ("power tower vs 1", "\\boxed{9^{9^{9}}}", "1"),
        ("300x300 matrix", "\\boxed{" + matrix + "}", matrix),
        ("100k \\frac", "\\boxed{" + "\\frac{1}{2}+" * 100_000 + "1}", "50001"),
        ("factorial tower", "\\boxed{(10^{10})!}", "5"),
        ("huge exponent", "\\boxed{2^{2^{40}}}", "2^{2^{40}}+1"),
    ]


def honest() -> list[tuple[str, str]]:
    return [("So the answer is $\\boxed{\\frac{1}{2}}$.", "0.5"), ("Answer: 1\\,234", "1234"),
            ("The roots are $\\boxed{-1}$ and $\\boxed{4}$.", "4, -1"), ("$\\boxed{x > 3}$", "(3,\\infty)"),
            ("Thus $\\boxed{0.\\overline{3}}$.", "\\frac{1}{3}"), ("$\\boxed{\\sqrt{8}}$", "2\\sqrt{2}")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--mode", default="math", choices=reward.MODES)
    a = ap.parse_args(argv)
    if a.timeout <= 0 or a.workers < 1:
        print("error: --timeout must be > 0 and --workers >= 1", file=sys.stderr)
        raise SystemExit(2)
    r = reward.MathReward(wrong_reward=-1.0, timeout=a.timeout, workers=a.workers, mode=a.mode)
    try:
        t0 = time.monotonic()
        r.warm()
        print(f"pool of {a.workers} workers (+1 spare) warm in {time.monotonic() - t0:.1f} s; timeout {a.timeout} s, "
              f"bound per call {a.timeout + 0.5:.1f} s; load {os.getloadavg()[0]:.2f}")
        print(f"{'input':28s} {'call s':>7s}  timed out  reward")
        worst = 0.0
        for name, comp, gold in pathological():
            t0 = time.monotonic()
            v = r.verdicts([comp], [gold])[0]
            wall = time.monotonic() - t0
            worst = max(worst, wall)
            print(f"{name:28s} {wall:7.2f}  {str(v.timed_out):9s}  {r.correct_reward if v.correct else r.wrong_reward:+.0f}")
        print(f"worst single call: {worst:.2f} s (bound {a.timeout + 0.5:.1f} s): {'OK' if worst <= a.timeout + 0.5 else 'OVER'}")
        bad = pathological()
        good = honest()
        comps = [c for _, c, _ in bad] + [c for c, _ in good]
        golds = [g for _, _, g in bad] + [g for _, g in good]
        t0 = time.monotonic()
        v = r.verdicts(comps, golds)
        wall = time.monotonic() - t0
        n_to = sum(x.timed_out for x in v)
        honest_ok = all(x.correct for x in v[len(bad):])
        worst_call = max(x.seconds for x in v)
        print(f"mixed batch: {len(bad)} pathological + {len(good)} honest, wall {wall:.2f} s, timeouts {n_to}, "
              f"worst call {worst_call:.2f} s, honest answers all scored right: {honest_ok}; "
              f"at most ceil(timeouts / workers) x timeout = {-(-n_to // a.workers) * a.timeout:.1f} s is the timeouts' share")
    finally:
        r.close()


if __name__ == "__main__":
    main()
