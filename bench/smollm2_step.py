"""One GRPO step of SmolLM2-135M-Instruct on a CPU, by setting: where the time goes. Prints figures, asserts nothing.

    python bench/smollm2_step.py                                # the settings in VARIANTS, 64 responses x 128 tokens
    python bench/smollm2_step.py --variants "fp32 1 thread" "bf16-mixed 2 threads"

Each variant is `python train.py --model smollm2-135m-instruct --reward math --template chat --batch-size 64
--group-size 8 --max-new-tokens 128 --max-steps STEPS` + its flags, a fresh process (the prompts ask to reason step by
step: responses run to the limit, as the real model's do); the figures are the last step's (the first pays start-up):
generation + scoring (perf/gen_time_s), the update and the rest (step - generation), the step, response tokens and the
truncated share. The machine's load average is printed beside each: a figure means "on 2 quiet cores" only at ~0.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ["--model", "smollm2-135m-instruct", "--train-data", "builtin-math", "--reward", "math", "--template", "chat",
        "--batch-size", "64", "--group-size", "8", "--max-new-tokens", "128", "--eval-problems", "4", "--eval-samples",
        "0", "--eval-every", "0", "--save-every", "0", "--reward-workers", "0"]
FAST = ["--dtype", "bf16-mixed", "--threads", "2", "--attn-implementation", "eager", "--rollout-dtype", "bfloat16",
        "--draw", "inverse-cdf"]
VLLM = ["--dtype", "bf16-mixed", "--threads", "2", "--attn-implementation", "eager", "--rollout", "vllm", "--rollout-dtype",
        "bfloat16"]
VARIANTS = {
    "fp32 1 thread": [],
    "bf16-mixed 1 thread": ["--dtype", "bf16-mixed"],
    "bf16-mixed 2 threads": ["--dtype", "bf16-mixed", "--threads", "2"],
    "bf16-mixed 2 threads vllm": ["--dtype", "bf16-mixed", "--threads", "2", "--rollout", "vllm"],
    "bf16-mixed 2 threads lora 32": ["--dtype", "bf16-mixed", "--threads", "2", "--lora-rank", "32"],
    "+ eager attention, bf16 rollout copy, inverse-cdf draw": FAST,
    "+ eager attention, bf16 rollout copy, inverse-cdf draw, lora 32": [*FAST, "--lora-rank", "32"],
    # the same without bf16: on a CPU without AMX (avx512_bf16 alone) bf16 matmuls are slower than fp32 ones
    "fp32 2 threads, eager attention, inverse-cdf draw": ["--threads", "2", "--attn-implementation", "eager", "--draw",
                                                          "inverse-cdf"],
    "bf16-mixed 2 threads eager, vllm bf16": VLLM,
    "bf16-mixed 2 threads eager, vllm bf16, lora 32": [*VLLM, "--lora-rank", "32"],
}


def cpu_flags() -> str:
    """The CPU's bf16 support, which decides whether bf16 autocast pays: 'amx', 'avx512_bf16' or 'none'."""
    sys.path.insert(0, ROOT)
    from runs import bf16_support, machine

    return bf16_support(machine()["isa"])


def one(flags: list[str], steps: int, out: str) -> dict:
    cmd = [sys.executable, os.path.join(ROOT, "train.py"), *BASE, "--max-steps", str(steps), "--output-dir", out, *flags]
    t0, load = time.time(), os.getloadavg()[0]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0"))
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    row = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))][-1]
    return {"gen_s": row["perf/gen_time_s"], "step_s": row["perf/step_time_s"],
            "update_s": row["perf/step_time_s"] - row["perf/gen_time_s"],
            "tokens": round(row["rollout/response_length"] * 64), "truncated": row["rollout/truncated_frac"],
            "entropy": row.get("policy/entropy"), "wall_s": time.time() - t0,
            "load": f"{load:.1f}-{os.getloadavg()[0]:.1f}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", default="", help="also append each result as a JSON line to this file")
    a = ap.parse_args()
    print(f"CPU bf16 support: {cpu_flags()}")
    print("| variant | generation s | update s | step s | response tokens | truncated | load |")
    print("|---|---|---|---|---|---|---|")
    for name in a.variants:
        with tempfile.TemporaryDirectory() as d:
            r = one(VARIANTS[name], a.steps, d)
        if "error" in r:
            print(f"| {name} | {r['error']} | | | | | |", flush=True)
        else:
            print(f"| {name} | {r['gen_s']:.1f} | {r['update_s']:.1f} | {r['step_s']:.1f} | {r['tokens']} | "
                  f"{r['truncated']:.2f} | {r['load']} |", flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps({"variant": name, "flags": VARIANTS[name], "cpu_bf16": cpu_flags(), **r}) + "\n")


if __name__ == "__main__":
    main()
