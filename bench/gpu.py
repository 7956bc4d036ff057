"""On a CUDA GPU: one policy update's peak memory and speed, and the fast engine's generation speed, at the real
shapes of Qwen2.5 sizes at full depth (random weights), next to the memory plan of docs/memory.md.

    python bench/gpu.py                                   # 0.5B and 1.5B full + LoRA, 3B and 7B LoRA; 1k and 4k responses
    python bench/gpu.py --sizes 1.5B --modes lora --resps 4096
    python bench/gpu.py --device cpu --layers 2 --sizes 0.5B --resps 64 --gen-tokens 8   # the code path, on CPU

Each (size, mode) builds a random Qwen2 with the size's hidden, MLP, heads, KV heads, vocabulary (151,936) and
tying, at full depth, as train.py holds it under bf16-mixed (trainer/setup.py): full = fp32 weights + AdamW over
all; lora = the base in bf16, frozen, + trainer.lora.wrap adapters (r 16, alpha 32, all linear layers) with AdamW
over them (fused on CUDA, as train.py steps it; --adamw foreach: torch's default step, the one
bench/results/gpu_h100.md measured). Gradient checkpointing on (non-reentrant), the chunked LM head (chunk 256). One
update = a micro-batch of `--micro` responses of R tokens after `--prompt` prompt tokens: forward under bf16 autocast
(trainer.logprobs.response_logprobs, entropy included, as train.py logs it), the GRPO loss (grpo.policy_loss),
backward, AdamW step. The first update warms up (kernels, allocator); the second is timed and measured:
peak = torch.cuda.max_memory_allocated over it (weights, gradients, AdamW states, activations), reserved = the
allocator's peak reservation. Generation: trainer-side `--rollout fast` (engines.hf.FastEngine, the training model
itself under bf16 autocast), `--gen-rows` rows x `--gen-tokens` new tokens at temperature 1 from 64-token prompts;
random weights almost never sample an end token, so every row runs to the limit (tokens/s = rows x tokens / s).

The plan column: docs/memory.md's CPU-measured component costs at 1 and 2 layers (bench/memory.py --plan --ckpt
--resp 64 --base-dtype bfloat16), extrapolated as bench/memory.py does (a + b x layers, + (T - T_cpu) x
(layers x hidden x 2 B + hidden x 47 B) for the extra tokens), with T = micro x (prompt + R); for full fine-tuning
at least 20 B per parameter (AdamW's foreach step, bench/memory.py FOREACH_ADAMW_B; the fused step's peak is not
yet measured). The plan's separate +1.5 GB (CUDA context and allocator slack) is not in it: `context` is the CUDA
context measured at the start, `reserved` the allocator's peak reservation over the update (its cache emptied before
it). Generation runs before the first update, so for full fine-tuning its peak has no AdamW states yet (train.py's
rollouts after step 1 hold them: + 8 B/param).
Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
import types

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project is one folder up
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import grpo  # noqa: E402
from memory import FOREACH_ADAMW_B, QWEN25, VOCAB, adamw_step_gb, extrapolated_gb, n_params, read_measured  # noqa: E402
from config import add_threads  # noqa: E402
from tools.cli import set_threads  # noqa: E402
from trainer import batches, logprobs  # noqa: E402

GB = 2**30


def plan_gb(size: str, mode: str, tokens: int, doc=os.path.join(ROOT, "docs", "memory.md")) -> float | None:
    """docs/memory.md's trainer GB for `tokens` tokens per micro-batch, as bench/memory.py --plan computes it from the
    CPU table there (None: the size/mode has no CPU rows)."""
    rows = read_measured(doc, 1, 2)
    if (size, mode) not in rows:
        return None
    m = re.search(r"--plan --ckpt --resp (\d+)", open(doc).read())
    t_cpu = 2 * (64 + int(m.group(1)))  # bench/memory.py's defaults: micro-batch 2, prompt 64
    gb = extrapolated_gb(size, *rows[(size, mode)], 1, 2, tokens, t_cpu)
    return max(gb, adamw_step_gb(size)) if mode == "full" else gb  # full fine-tuning: AdamW's step, if larger


def build(size: str, mode: str, layers: int, device: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer import lora

    h, inter, L, heads, kv, tied = QWEN25[size]
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers or L,
                      num_attention_heads=heads, num_key_value_heads=kv, tie_word_embeddings=tied,
                      max_position_embeddings=32768)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it lives: a 7B model's init on the CPU alone takes minutes
        model = Qwen2ForCausalLM(cfg).to(torch.float32 if mode == "full" else torch.bfloat16)
    model.generation_config.eos_token_id = None  # the tokenizer's end tokens only
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if mode == "lora":
        model = lora.wrap(model, types.SimpleNamespace(lora_rank=16, lora_alpha=32, lora_dropout=0.0, seed=0,
                                                       lora_targets="all-linear", gradient_checkpointing=True))
    model.train()
    return model


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def update(model, opt, micro, prompt, resp, device, g):
    class Tok:
        pad_token_id = 0

    p_ids = [torch.randint(0, VOCAB, (prompt,), generator=g).tolist() for _ in range(micro)]
    r_ids = [torch.randint(0, VOCAB, (resp,), generator=g).tolist() for _ in range(micro)]
    batch = batches.make_batch(Tok, p_ids, r_ids, device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logp, ent = logprobs.response_logprobs(model, batch, 1.0, with_entropy=True, chunk_size=256)
    adv = torch.linspace(-1, 1, micro, device=device)
    loss, _ = grpo.policy_loss(logp, logp.detach(), adv, batch.mask, num_seqs=micro)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def generate(model, tok, rows: int, tokens: int, device: str, engine: str = "fast", check_every: int | None = None) -> float:
    """Generated tokens/s. engine: 'fast' (engines.hf.FastEngine, host check every `check_every` tokens: None = its
    default, 1), 'hf' (HFEngine: transformers' generate) or 'hf-static' (generate with cache_implementation="static":
    a preallocated KV cache, and on CUDA transformers compiles the decode step itself)."""
    import rollout
    from engines.hf import FastEngine, HFEngine

    eng = (FastEngine if engine == "fast" else HFEngine)(model, tok, max_batch=rows)
    if engine == "fast" and check_every:
        eng.check_every = check_every
    gc = model.generation_config
    gc.cache_implementation = "static" if engine == "hf-static" else None
    g = torch.Generator().manual_seed(2)
    words = ["apple", "river", "seven", "plus", "the", "sum", "of", "and", "is", "what"]
    prompts = [" ".join(words[int(i)] for i in torch.randint(0, len(words), (64,), generator=g)) for _ in range(rows)]
    with torch.autocast(device, dtype=torch.bfloat16):
        sync(device)
        t0 = time.perf_counter()
        out = eng.generate(prompts, 1, rollout.SamplingParams(temperature=1.0, max_new_tokens=tokens))
        sync(device)
    dt = time.perf_counter() - t0
    gc.cache_implementation = None
    return sum(c.length for o in out for c in o) / dt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="0.5B,1.5B,3B,7B")
    ap.add_argument("--modes", default="full,lora")
    ap.add_argument("--resps", default="1024,4096", help="response tokens per row, comma-separated")
    ap.add_argument("--micro", type=int, default=2, help="responses per micro-batch (the plan's 2)")
    ap.add_argument("--prompt", type=int, default=256, help="prompt tokens (the plan's 256)")
    ap.add_argument("--gen-rows", type=int, default=64, help="rows generated at once (e.g. 8 prompts x G 8)")
    ap.add_argument("--gen-tokens", type=int, default=512, help="new tokens per row (0: no generation)")
    ap.add_argument("--layers", type=int, default=0, help="cut every size to this depth (0: full depth)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--adamw", default="fused", choices=["fused", "foreach"],
                    help="AdamW's step on CUDA: fused (train.py's, trainer.setup.make_optimizer) or torch's default foreach "
                         "(bench/results/gpu_h100.md's rows); the CPU always takes torch's default")
    add_threads(ap)  # train.py's --threads (the CPU path)
    a = ap.parse_args()
    set_threads(a.threads)
    dev = a.device
    if dev == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda: torch sees no CUDA device (torch.cuda.is_available() is False); "
                         "--device cpu runs the code path on the CPU")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models", "tiny-qwen2-chat"))  # a Qwen2.5-style BPE tokenizer
    total = torch.cuda.get_device_properties(0).total_memory if dev == "cuda" else 0
    if dev == "cuda":
        torch.cuda.init()
        torch.zeros(1, device=dev)
        free, tot = torch.cuda.mem_get_info()
        name = torch.cuda.get_device_name(0)
        print(f"{name}, {tot / GB:.1f} GiB; torch {torch.__version__} (CUDA {torch.version.cuda}); CUDA context + "
              f"torch at start: {(tot - free) / GB:.2f} GiB")
    print(f"micro-batch {a.micro} x ({a.prompt} + R) tokens, bf16 autocast, gradient checkpointing, LM-head chunk 256, "
          f"LoRA r 16 all-linear; generation {a.gen_rows} rows x {a.gen_tokens} tokens (fast engine)")
    print("| model | mode | layers | trainable M | weights GiB | R | update peak GiB | reserved GiB | plan GiB | "
          "peak / plan | update s | update tokens/s | gen tokens/s | gen peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for size in a.sizes.split(","):
        for mode in a.modes.split(","):
            L = a.layers or QWEN25[size][2]
            if mode == "full" and total and n_params(size, L) * (16 + FOREACH_ADAMW_B) > 0.9 * total:
                print(f"| Qwen2.5-{size} | {mode} | {L} | not run: {n_params(size, L) * (16 + FOREACH_ADAMW_B) / GB:.0f} GiB of fp32 weights "
                      f"+ gradients + AdamW and its step > 90% of the GPU | | | | | | | | | | |", flush=True)
                continue
            model = build(size, mode, a.layers, dev)
            params = [p for p in model.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(params, lr=1e-7, **({"fused": True} if a.adamw == "fused" and dev == "cuda" else {}))
            weights = torch.cuda.memory_allocated() / GB if dev == "cuda" else float("nan")
            g = torch.Generator().manual_seed(1)
            gen = gen_peak = float("nan")
            if a.gen_tokens:
                if dev == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                generate(model, tok, min(8, a.gen_rows), 8, dev)  # warm-up
                gen = generate(model, tok, a.gen_rows, a.gen_tokens, dev)
                if dev == "cuda":
                    gen_peak = torch.cuda.max_memory_allocated() / GB
            for resp in (int(r) for r in a.resps.split(",")):
                try:
                    update(model, opt, a.micro, a.prompt, resp, dev, g)  # warm-up (and AdamW's states)
                    sync(dev)
                    if dev == "cuda":
                        torch.cuda.empty_cache()  # `reserved` then counts what this update reserves, not older caches
                        torch.cuda.reset_peak_memory_stats()
                    t0 = time.perf_counter()
                    update(model, opt, a.micro, a.prompt, resp, dev, g)
                    sync(dev)
                    dt = time.perf_counter() - t0
                except torch.OutOfMemoryError:
                    print(f"| Qwen2.5-{size} | {mode} | {L} | | | {resp} | out of memory | | | | | | | |", flush=True)
                    opt.zero_grad(set_to_none=True)
                    continue
                peak = torch.cuda.max_memory_allocated() / GB if dev == "cuda" else float("nan")
                res = torch.cuda.max_memory_reserved() / GB if dev == "cuda" else float("nan")
                T = a.micro * (a.prompt + resp)
                pl = plan_gb(size, mode, T) if not a.layers else None
                print(f"| Qwen2.5-{size} | {mode} | {L} | {sum(p.numel() for p in params) / 1e6:.1f} | {weights:.2f} | "
                      f"{resp} | {peak:.2f} | {res:.2f} | {f'{pl:.2f}' if pl else 'n/a'} | "
                      f"{f'{peak / pl:.2f}' if pl else ''} | {dt:.2f} | {T / dt:,.0f} | {gen:,.0f} | {gen_peak:.2f} |",
                      flush=True)
                gen = gen_peak = float("nan")  # once per model
            del model, opt, params
            if dev == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
