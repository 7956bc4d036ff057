"""Speed and memory of the default run: steps/s, tokens/s, step-time split and peak memory. Prints figures, asserts nothing.

    python bench/speed.py                    # 20 steps of the default config (tiny model, built-in task, CPU)
    python bench/speed.py --steps 10 -- --batch-size 128 --threads 1    # anything after -- goes to train.py
"""
import argparse
import json
import os
import resource
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project is one folder up

import train


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("rest", nargs="*", help="extra train.py arguments (after --)")
    a = ap.parse_args()
    out = tempfile.mkdtemp(prefix="bench-")
    t0 = time.time()
    hist = train.main(["--output-dir", out, "--max-steps", str(a.steps), "--eval-every", "0", *a.rest])
    wall = time.time() - t0
    rows = hist[1:] if len(hist) > 1 else hist  # the first step pays one-off start-up costs
    step_t = sum(r["perf/step_time_s"] for r in rows) / len(rows)
    gen_t = sum(r["perf/gen_time_s"] for r in rows) / len(rows)
    toks = sum(r["perf/tokens_per_s"] * r["perf/step_time_s"] for r in rows)
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cfg = json.load(open(os.path.join(out, "config.json")))
    res = {
        "device": "cuda:" + torch.cuda.get_device_name() if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)",
        "steps": len(hist), "responses_per_step": cfg["batch_size"],
        "steps_per_s": round(1 / step_t, 3), "step_time_s": round(step_t, 2), "generation_share": round(gen_t / step_t, 3),
        "response_tokens_per_s": round(toks / sum(r["perf/step_time_s"] for r in rows), 1),
        "peak_rss_trainer_mib": round(self_kb / 1024, 1), "peak_rss_largest_child_mib": round(kids_kb / 1024, 1),
        "peak_cuda_mib": round(torch.cuda.max_memory_allocated() / 2**20, 1) if torch.cuda.is_available() else None,
        "wall_time_s_incl_evals": round(wall, 1),
    }
    for k, v in res.items():
        print(f"{k:32s} {v}")


if __name__ == "__main__":
    sys.exit(main())
