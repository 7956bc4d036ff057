"""Synchronous (K = 0) vs one-step off-policy (K = 1, --rollout-lag 1) training: steps/s, where a step's time goes, and
held-out accuracy per step and per wall-second; the same seeds, the two taking turns (K0 K1 K0 K1 ...), each run a fresh
process. Prints figures, asserts nothing.

    python bench/async_rollout.py                            # seeds 0,1,2, 40 steps of the default run each
    python bench/async_rollout.py --seeds 0 --steps 20 -- --batch-size 128 --mini-batch-size 128   # after --: train.py's

Per run: the median step time over steps 2.. (the first pays start-up), the trainer's wait for generation (K = 0:
all of generation; K = 1: what the producer had not finished when the update was done), the producer's idle time,
and the held-out greedy accuracy at each evaluation (every --eval-every steps) with the run's wall time at that point.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one(k: int, seed: int, steps: int, eval_every: int, rest: list[str], out: str) -> dict:
    cmd = [sys.executable, os.path.join(ROOT, "train.py"), "--output-dir", out, "--seed", str(seed), "--max-steps", str(steps),
           "--eval-every", str(eval_every), "--eval-samples", "0", "--save-every", "0", *(["--rollout-lag", "1"] if k else []), *rest]
    t0 = time.time()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))
    wall = time.time() - t0
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    evals = [json.loads(line) for line in open(os.path.join(out, "evals.jsonl"))]
    later = rows[1:] or rows
    step_t = statistics.median(r["perf/step_time_s"] for r in later)
    wait = statistics.mean(r.get("async/trainer_wait_s", r["perf/gen_time_s"]) for r in later)
    idle = statistics.mean(r.get("async/producer_idle_s", 0.0) for r in later)
    gen = statistics.mean(r.get("async/gen_time_s", r["perf/gen_time_s"]) for r in later)
    t_of = {r["step"]: sum(x["perf/step_time_s"] for x in rows[: r["step"]]) for r in rows}
    curve = [(e["step"], round(t_of.get(e["step"], 0.0), 1), e["eval/accuracy"]) for e in evals]
    return {"K": k, "seed": seed, "wall_s": round(wall, 1), "step_s": round(step_t, 3), "steps_per_s": round(1 / step_t, 3),
            "trainer_wait_s": round(wait, 3), "producer_idle_s": round(idle, 3), "generation_s": round(gen, 3),
            "curve": curve, "load": round(os.getloadavg()[0], 1)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("rest", nargs="*", help="extra train.py arguments (after --)")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    base = tempfile.mkdtemp(prefix="bench-async-")
    runs = []
    for seed in seeds:
        for k in (0, 1):
            r = one(k, seed, a.steps, a.eval_every, a.rest, os.path.join(base, f"K{k}-seed{seed}"))
            runs.append(r)
            print(json.dumps(r), flush=True)
    print(f"\n{os.cpu_count()} cores; {a.steps} steps; evaluation every {a.eval_every}; train.py {' '.join(a.rest)}\n")
    print("| K | seed | s/step (median) | steps/s | trainer waits for generation (s/step) | producer idle (s/step) | "
          "generation (s/step) | held-out accuracy: step (s) acc ... | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        c = ", ".join(f"{s} ({t}) {acc:.3f}" for s, t, acc in r["curve"])
        print(f"| {r['K']} | {r['seed']} | {r['step_s']} | {r['steps_per_s']} | {r['trainer_wait_s']} | {r['producer_idle_s']} | "
              f"{r['generation_s']} | {c} | {r['load']} |")
    ratios = [b["steps_per_s"] / a_["steps_per_s"] for a_, b in zip(runs[0::2], runs[1::2])]
    finals = {k: [r["curve"][-1][2] for r in runs if r["K"] == k] for k in (0, 1)}
    print(f"\nK = 1 / K = 0 steps/s per seed: {', '.join(f'{x:.2f}x' for x in ratios)} (median {statistics.median(ratios):.2f}x)")
    for k in (0, 1):
        v = finals[k]
        print(f"final held-out greedy accuracy, K = {k}: {', '.join(f'{x:.3f}' for x in v)} (mean {statistics.mean(v):.3f}, "
              f"range {min(v):.3f}-{max(v):.3f})")


if __name__ == "__main__":
    main()
