"""On a CUDA GPU: the fast engine (host check every 16 tokens and every token) and HF generate at Qwen2.5-0.5B shapes
(random weights, fp32 under bf16 autocast, as train.py generates), 64 rows x 128 new tokens, tokens/s; then a
torch.profiler table of each engine on 64 x 32 into OUT_DIR/profile_<engine>_<k>.txt.

    python bench/gpu_engines.py OUT_DIR

The measurement behind `--rollout auto` choosing HF generate on a GPU (rollout.auto_engine); its H100 output, with the
train.py and TRL runs of the same session, is bench/results/gpu_engines_h100.md.
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project is one folder up
sys.path.insert(0, os.path.join(ROOT, "bench"))  # bench/gpu.py
sys.path.insert(0, ROOT)  # before bench/: the project's modules win over a benchmark of the same name

from tools.cli import ArgParser, cli  # noqa: E402


def main():
    ap = ArgParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder for the profile tables (created)")
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoTokenizer

    import gpu

    if not torch.cuda.is_available():
        raise SystemExit("error: bench/gpu_engines.py measures a CUDA GPU and this machine has none")
    os.makedirs(a.out, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models", "tiny-qwen2-chat"))  # a Qwen2.5-style BPE tokenizer
    model = gpu.build("0.5B", "full", None, "cuda")
    for eng, k in [("fast", 16), ("fast", 1), ("hf", None)]:
        gpu.generate(model, tok, 8, 8, "cuda", eng, k)  # warm-up
        tps = gpu.generate(model, tok, 64, 128, "cuda", eng, k)
        print(f"0.5B 64x128 {eng} k={k}: {tps:,.0f} tokens/s", flush=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            gpu.generate(model, tok, 64, 32, "cuda", eng, k)
            dt = time.perf_counter() - t0
        ka = prof.key_averages()
        with open(os.path.join(a.out, f"profile_{eng}_{k}.txt"), "w") as f:
            f.write(f"64x32 in {dt:.2f} s\n")
            f.write(ka.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60))
            f.write(ka.table(sort_by="self_device_time_total", row_limit=20, max_name_column_width=60))
        top = sorted(ka, key=lambda e: -e.self_cpu_time_total)[:8]
        print("  top self-CPU:", "; ".join(f"{e.key} {e.self_cpu_time_total / 1e3:.0f}ms x{e.count}" for e in top), flush=True)


if __name__ == "__main__":
    sys.exit(cli(main))
