"""The fast engine's two draws of a sampled token, timed on one decode step's probabilities: torch.multinomial's own
(`--draw multinomial`: an Exp(1) number per vocabulary entry and row, argmax(p / q)) against the inverse CDF
(`--draw inverse-cdf`: one uniform per row, engines.hf.inverse_cdf). Prints figures, asserts nothing.

    python bench/sampling_draw.py                       # 64 rows x SmolLM2's 49,152-token vocabulary, 2 threads
    python bench/sampling_draw.py --rows 256 --vocab 151936 --threads 1
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from engines.hf import inverse_cdf  # noqa: E402


def per_call_ms(fn, reps: int) -> float:
    fn()  # warm-up
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--steps", type=int, default=128, help="decode steps a response of this many tokens takes")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    probs = torch.softmax(torch.randn(a.rows, a.vocab) * 3, dim=-1)

    def multinomial():
        q = torch.empty_like(probs).exponential_(1)
        return (probs / q).argmax(-1)

    def cdf():
        return inverse_cdf(probs, torch.rand(a.rows, dtype=torch.float64))

    print(f"{a.rows} rows x {a.vocab} vocabulary, {a.threads} thread(s), torch {torch.__version__}")
    for name, fn in (("multinomial (exponential race)", multinomial), ("inverse-cdf", cdf)):
        ms = per_call_ms(fn, a.reps)
        print(f"  {name:32s} {ms:8.2f} ms a decode step   {ms * a.steps / 1e3:6.2f} s over {a.steps} steps")


if __name__ == "__main__":
    main()
