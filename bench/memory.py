"""Peak memory of one policy update with a real vocabulary: full logits (before) vs chunked LM head (after).

    python bench/memory.py                 # the table: Qwen2.5's vocabulary (151,936), a ~10M-parameter random Qwen2
    python bench/memory.py --probe         # one row: batch 8 x 1024 response tokens, micro-batch 2, both paths
    python bench/memory.py --pairs 2x1024,8x1024,2x4096 --vocab 151936 --hidden 64 --layers 2
    python bench/memory.py --lora-probe    # full fine-tuning vs --lora-rank 16 (vs QLoRA) on the 4-layer 1.5B probe
    python bench/memory.py --plan          # component costs at Qwen2.5 shapes -> peak per model, mode and GPU size

Each configuration runs in a fresh subprocess (peak RSS is per process): build the random model (fp32, seeded) and
AdamW, then one update of a batch of 8 responses (prompt 64 tokens): micro-batches of forward + GRPO loss +
backward, one optimizer step, `policy/entropy` computed as train.py does. Printed: peak RSS of the whole process,
the RSS before the update (model, optimizer, Python, torch), and their difference, which is what the update costs.
CPU figures: on a GPU the same tensors are allocated, so the update's difference is the activation + logits
memory a GPU would need on top of weights, gradients and optimizer states (docs/multi_gpu.md, "Memory").

--lora-probe / --plan (docs/memory.md): a random model with a Qwen2.5 size's real shapes (hidden, MLP, heads, vocabulary,
tied or not) cut to a few layers; modes full (fp32 weights + AdamW over all), lora (frozen base + lora.wrap adapters,
AdamW over the adapters) and qlora (the base NF4 through bitsandbytes). Each child measures the weights (RSS after
building the model minus before) and the update's peak above them (the peak RSS is reset after the build through
/proc/self/clear_refs, so building and quantising do not count); gradients, AdamW states and activations are in
the latter. --plan fits cost = a + b x layers from two depths per size and mode and extrapolates to the full depth.
"""
import argparse
import contextlib
import json
import os
import re
import resource
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project is one folder up

import grpo  # noqa: E402
from trainer import batches  # noqa: E402
from trainer import logprobs  # noqa: E402


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def current_rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def build(vocab, hidden, layers, seed=0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=32768)
    return Qwen2ForCausalLM(cfg)


QWEN25 = {  # Qwen2.5 (Instruct) config.json: hidden, intermediate, layers, heads, kv heads, tied embeddings
    "0.5B": (896, 4864, 24, 14, 2, True), "1.5B": (1536, 8960, 28, 12, 2, True),
    "3B": (2048, 11008, 36, 16, 2, True), "7B": (3584, 18944, 28, 28, 4, False),
}
VOCAB = 151936


def vm_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def build_real(size: str, layers: int, mode: str, base_dtype, seed=0):
    """A random Qwen2 with Qwen2.5-`size`'s shapes cut to `layers` layers: fp32 for full fine-tuning, else the frozen
    base in base_dtype (qlora: NF4 through a bf16 save + bitsandbytes reload, as from_pretrained quantises)."""
    import tempfile

    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Qwen2Config, Qwen2ForCausalLM

    h, inter, _, heads, kv, tied = QWEN25[size]
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=h, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, tie_word_embeddings=tied, max_position_embeddings=32768)
    torch.manual_seed(seed)
    if mode != "qlora":
        return Qwen2ForCausalLM(cfg).to(torch.float32 if mode == "full" else base_dtype)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as d:
        Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(d)
        q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=base_dtype)
        return AutoModelForCausalLM.from_pretrained(d, quantization_config=q, dtype=base_dtype)


def child_real(a):
    """One update at a Qwen2.5 shape: prints weights MB, update peak above them MB, trainable parameters."""
    import ctypes
    import gc
    import types

    from trainer import lora

    torch.set_num_threads(1)
    before = vm_kb("VmRSS")
    base_dtype = getattr(torch, a.base_dtype)
    model = build_real(a.size, a.layers, a.mode, base_dtype)
    if a.ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if a.mode != "full":
        model = lora.wrap(model, types.SimpleNamespace(lora_rank=a.rank, lora_alpha=32, lora_dropout=0.0, seed=0,
                                                       lora_targets="all-linear", gradient_checkpointing=a.ckpt))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    g = torch.Generator().manual_seed(1)
    p_ids = [torch.randint(0, VOCAB, (a.prompt,), generator=g).tolist() for _ in range(a.micro)]
    r_ids = [torch.randint(0, VOCAB, (a.resp,), generator=g).tolist() for _ in range(a.micro)]

    class Tok:
        pad_token_id = 0

    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)  # return what building / quantising freed, so RSS counts what is kept
    weights = vm_kb("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # reset the peak RSS (VmHWM): the build does not count
        f.write("5")
    t0 = time.time()
    batch = batches.make_batch(Tok, p_ids, r_ids, "cpu")
    amp = torch.autocast("cpu", dtype=torch.bfloat16) if base_dtype == torch.bfloat16 else contextlib.nullcontext()
    with amp:  # bf16 base: the forward under autocast, as bf16-mixed does
        logp, ent = logprobs.response_logprobs(model, batch, 1.0, with_entropy=True, chunk_size=a.chunk)
    loss, _ = grpo.policy_loss(logp, logp.detach(), torch.ones(a.micro), batch.mask, num_seqs=a.micro)
    loss.backward()
    opt.step()
    print(json.dumps({"weights_mb": (weights - before) / 1024, "update_mb": (vm_kb("VmHWM") - weights) / 1024,
                      "trainable_m": sum(p.numel() for p in params) / 1e6, "update_s": time.time() - t0}))


def run_real(size, layers, mode, a):
    cmd = [sys.executable, os.path.abspath(__file__), "--child-real", "--size", size, "--layers", str(layers), "--mode", mode,
           "--rank", str(a.rank), "--micro", str(a.micro), "--prompt", str(a.prompt), "--resp", str(a.resp),
           "--chunk", str(a.chunk), "--base-dtype", a.base_dtype] + (["--ckpt"] if a.ckpt else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:100]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def lora_probe(a):
    """The issue's done-when: the 4-layer Qwen2.5-1.5B-shaped probe, full fine-tuning vs LoRA (vs QLoRA)."""
    print(f"Qwen2.5-1.5B shapes, {a.layers} layers, micro-batch {a.micro} x ({a.prompt} + {a.resp}) tokens, "
          f"gradient checkpointing {'on' if a.ckpt else 'off'}, LoRA r {a.rank} alpha 32 all-linear, frozen base "
          f"{a.base_dtype}; load {os.getloadavg()[0]:.2f}")
    print("| mode | trainable M | weights MB | update peak above weights MB | total MB | x full |")
    print("|---|---|---|---|---|---|")
    full = None
    for mode in ("full", "lora", "qlora"):
        r = run_real("1.5B", a.layers, mode, a)
        if "error" in r:
            print(f"| {mode} | failed: {r['error']} | | | | |", flush=True)
            continue
        tot = r["weights_mb"] + r["update_mb"]
        full = full or tot
        print(f"| {mode} | {r['trainable_m']:.1f} | {r['weights_mb']:.0f} | {r['update_mb']:.0f} | {tot:.0f} | "
              f"{tot / full:.2f} |", flush=True)


def n_params(size: str, layers: int | None = None) -> int:
    """Parameters of Qwen2.5-`size` (at `layers` layers): embeddings (+ untied LM head), per layer q/k/v (with biases),
    o, the SwiGLU MLP and two norms, the final norm."""
    h, inter, L, heads, kv, tied = QWEN25[size]
    kvd = kv * (h // heads)
    layer = h * (h + 2 * kvd) + (h + 2 * kvd) + h * h + 3 * h * inter + 2 * h
    return VOCAB * h * (1 if tied else 2) + (L if layers is None else layers) * layer + h


def plan(a):
    """Measured at two reduced depths per size and mode (or read back from a previous run's table, --measured); a + b x
    layers extrapolated to the full depth, then to the plan's tokens, with colocated vLLM's share and the GPU fits."""
    d1, d2 = (int(x) for x in a.depths.split(","))
    rows = {}  # (size, mode) -> (total MB at d1, total MB at d2)
    if a.measured:
        rows = read_measured(a.measured, d1, d2)
    else:
        print(f"micro-batch {a.micro} x ({a.prompt} + {a.resp}) tokens, gradient checkpointing {'on' if a.ckpt else 'off'}, "
              f"chunk {a.chunk}, LoRA r {a.rank}, frozen base {a.base_dtype}; depths {a.depths}; load {os.getloadavg()[0]:.2f}")
        print("| size | mode | depth | weights MB | update MB | total MB | per layer MB (slope) | full depth: total GB (extrapolated) |")
        print("|---|---|---|---|---|---|---|---|")
        for size in a.sizes.split(","):
            for mode in a.modes.split(","):
                L = QWEN25[size][2]
                if mode == "full" and n_params(size, d2) * 16 > a.max_full_gb * 2**30:
                    print(f"| {size} | {mode} | | not run: ~{n_params(size, d2) * 16 / 2**30:.0f} GB of fp32 weights + AdamW "
                          f"at depth {d2} (> --max-full-gb) | | | | |", flush=True)
                    continue
                rs = [run_real(size, d, mode, a) for d in (d1, d2)]
                if any("error" in r for r in rs):
                    print(f"| {size} | {mode} | | failed: {next(r['error'] for r in rs if 'error' in r)} | | | | |", flush=True)
                    continue
                tot = [r["weights_mb"] + r["update_mb"] for r in rs]
                rows[(size, mode)] = tuple(tot)
                slope = (tot[1] - tot[0]) / (d2 - d1)
                for d, r, t in zip((d1, d2), rs, tot):
                    last = f"{(tot[1] + slope * (L - d2)) / 1024:.1f} ({L} layers)" if d == d2 else ""
                    print(f"| {size} | {mode} | {d} | {r['weights_mb']:.0f} | {r['update_mb']:.0f} | {t:.0f} | "
                          f"{slope:.0f} | {last} |", flush=True)
    fits(a, rows, d1, d2)


def read_measured(path: str, d1: int, d2: int) -> dict:
    """The component-cost table of a previous --plan run (any file holding it: docs/memory.md does):
    (size, mode) -> (total MB at depth d1, at depth d2)."""
    rows = {}
    for line in open(path):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) == 8 and c[0] in QWEN25 and c[2].isdigit():
            rows.setdefault((c[0], c[1]), {})[int(c[2])] = float(c[5])
    return {k: (v[d1], v[d2]) for k, v in rows.items() if d1 in v and d2 in v}


def extrapolated_gb(size: str, t1: float, t2: float, d1: int, d2: int, tokens: int, tokens_measured: int) -> float:
    """Trainer GiB at full depth and `tokens` per micro-batch from the totals (MB) measured at depths d1 and d2 with
    `tokens_measured`: a + b x layers, + (tokens - tokens_measured) x (layers x h x 2 B + h x 47 B) (fits' docstring)."""
    h, _, L, *_ = QWEN25[size]
    return (t2 + (t2 - t1) / (d2 - d1) * (L - d2) + (tokens - tokens_measured) * (L * h * 2 + h * 47) / 2**20) / 1024


def adamw_step_gb(size: str) -> float:
    """Full fine-tuning's peak at AdamW's step on a GPU: weights, gradients, both moments and the step's temporary."""
    return (16 + FOREACH_ADAMW_B) * n_params(size) / 2**30


# torch's AdamW on CUDA defaults to its foreach implementation, whose step holds sqrt(v) for every parameter at once
# (torch._foreach_sqrt: one fp32 tensor per parameter) on top of weights, gradients and both moments; on the CPU it
# loops over the tensors (temporaries for one tensor at a time), so the CPU measurements above miss most of it.
# Measured on an H100 (bench/gpu.py, docs/memory.md): full fine-tuning's peak is that step, 20 B per parameter (+ <0.1
# GiB), at 1,024 and 4,096 response tokens alike; the activations, freed before the step, stay below it. The plan's
# full fine-tuning row is the larger of the two: the update's (CPU-extrapolated) peak and the step's 20 B/param.
FOREACH_ADAMW_B = 4


def fits(a, rows, d1, d2):
    """The plan: trainer peak at the plan's tokens, vLLM's share, and the GPU sizes it fits.

    Trainer peak = the measured total extrapolated to the full depth (a + b x L) + the activations of the extra tokens,
    (T - T_measured) x (L x h x 2 B + h x 47 B): with gradient checkpointing one bf16 hidden state per layer and token,
    plus one layer's full activations (~47 B per token and hidden unit in bf16, docs/multi_gpu.md's measured ~93 B in
    fp32). Full fine-tuning where it was not measured: 16 B per parameter + the 1.5B row's non-weight costs scaled by
    hidden size; full fine-tuning at least 20 B per parameter on a GPU (AdamW's step, FOREACH_ADAMW_B). vLLM (bf16):
    weights 2 B per parameter + the KV cache, 2 (K, V) x layers x kv heads x head dim x 2 B per token, for --plan-kv-tokens tokens in flight. "No vLLM": the fast / hf engine generating from the training
    model (its KV cache for the rollout batch comes on top at generation time, when no update runs). A GPU fits when trainer + vLLM + 1.5 GB (CUDA context, allocator
    slack; an estimate) <= its memory; vLLM's --vllm-gpu-memory-utilization is then (vLLM + 0.5 GB) / GPU."""
    T_meas, T = a.micro * (a.prompt + a.resp), a.plan_micro * (a.plan_prompt + a.plan_resp)
    gpu_rows = {}  # (size, mode) -> update peak GiB, where bench/gpu.py measured the plan's own micro-batch on a GPU
    if a.gpu_measured:
        text = open(a.gpu_measured).read()
        m = re.search(r"micro-batch (\d+) x \((\d+) \+ R\) tokens", text)
        if m and (int(m.group(1)), int(m.group(2))) == (a.plan_micro, a.plan_prompt):
            for line in text.splitlines():
                c = [x.strip() for x in line.strip().strip("|").split("|")]
                if len(c) == 14 and c[0].startswith("Qwen2.5-") and c[5] == str(a.plan_resp):
                    gpu_rows[(c[0][len("Qwen2.5-"):], c[1])] = float(c[6])
    print(f"\nplan: micro-batch {a.plan_micro} x ({a.plan_prompt} + {a.plan_resp}) tokens, gradient checkpointing, LoRA r "
          f"{a.rank}; vLLM bf16 with {a.plan_kv_tokens} tokens of KV cache; + 1.5 GB CUDA context / slack")
    print("| model | mode | trainer GB | origin | no vLLM: fits | vLLM GB (weights + KV) | with vLLM: total GB | fits (vLLM share) |")
    print("|---|---|---|---|---|---|---|---|")
    for size in QWEN25:
        h, inter, L, heads, kv, tied = QWEN25[size]
        extra = (T - T_meas) * (L * h * 2 + h * 47) / 2**20  # MB
        vllm = (2 * n_params(size) + 2 * L * kv * (h // heads) * 2 * a.plan_kv_tokens) / 2**30
        for mode in ("full", "lora", "qlora"):
            if (size, mode) in gpu_rows:
                trainer, origin = gpu_rows[(size, mode)], f"measured on a GPU ({os.path.basename(a.gpu_measured)})"
            elif (size, mode) in rows:
                trainer = extrapolated_gb(size, *rows[(size, mode)], d1, d2, T, T_meas)
                origin = f"measured on CPU at {d1}-{d2} layers, extrapolated"
            elif mode == "full" and ("1.5B", "full") in rows:
                t1, t2 = rows[("1.5B", "full")]
                rest = t2 - n_params("1.5B", d2) * 16 / 2**20  # the 1.5B row's non-weight part (MB)
                trainer = (n_params(size) * 16 / 2**20 + rest * h / 1536 + extra) / 1024
                origin = "16 B/param + the 1.5B row's activations scaled by h (computed)"
            else:
                continue
            step = adamw_step_gb(size)  # full fine-tuning's optimizer step on a GPU
            if mode == "full" and (size, mode) not in gpu_rows and step > trainer:
                trainer, origin = step, f"{16 + FOREACH_ADAMW_B} B/param: AdamW's step on a GPU (> {origin})"
            # QLoRA: 4-bit weights cannot be merged exactly, so vLLM keeps its own bf16 base and receives the adapter
            # alone (--lora-vllm-sync adapter): the same vLLM share as the other modes
            vllm_txt, v = (f"{vllm:.1f} (adapter sync)" if mode == "qlora" else f"{vllm:.1f}"), vllm
            total = trainer + v + 1.5
            fit = [f"{g} GB ({(v + 0.5) / g:.2f})" if v else f"{g} GB" for g in (16, 24, 40, 80) if total <= g]
            alone = [f"{g} GB" for g in (8, 16, 24, 40, 80) if trainer + 1.5 <= g]
            print(f"| Qwen2.5-{size} | {mode} | {trainer:.1f} | {origin} | {', '.join(alone[:2]) or 'none'}"
                  f"{' ...' if len(alone) > 2 else ''} | {vllm_txt} | {f'{total:.1f}' if v else 'n/a'} | "
                  f"{', '.join(fit) if v else ''}{'' if fit or not v else 'none of 16-80 GB on one GPU'} |", flush=True)


def child(a):
    torch.set_num_threads(1)
    model = build(a.vocab, a.hidden, a.layers)
    if a.ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    g = torch.Generator().manual_seed(1)
    N, P, R = a.batch, 64, a.resp
    p_ids = [torch.randint(0, a.vocab, (P,), generator=g).tolist() for _ in range(N)]
    r_ids = [torch.randint(0, a.vocab, (R,), generator=g).tolist() for _ in range(N)]
    adv = torch.randn(N, generator=g)

    class Tok:
        pad_token_id = 0

    base = current_rss_mb()
    t0 = time.time()
    ent_sum = 0.0
    for i in range(0, N, a.micro):
        batch = batches.make_batch(Tok, p_ids[i : i + a.micro], r_ids[i : i + a.micro], "cpu")
        logp, ent = logprobs.response_logprobs(model, batch, 1.0, with_entropy=True, chunk_size=a.chunk)
        mask = batch.mask
        loss, _ = grpo.policy_loss(logp, logp.detach(), adv[i : i + a.micro], mask, num_seqs=N)
        loss.backward()
        ent_sum += (ent * mask).sum().item()
    opt.step()
    opt.zero_grad(set_to_none=True)
    dt = time.time() - t0
    print(json.dumps({"peak_mb": rss_mb(), "base_mb": base, "update_s": dt, "entropy": ent_sum / (N * R),
                      "params_m": sum(p.numel() for p in model.parameters()) / 1e6}))


def run_one(a, micro, resp, chunk, ckpt):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--micro", str(micro), "--resp", str(resp),
           "--chunk", str(chunk), "--vocab", str(a.vocab), "--hidden", str(a.hidden), "--layers", str(a.layers),
           "--batch", str(a.batch)] + (["--ckpt"] if ckpt else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1][:80]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe", action="store_true", help="only the 8 x 1024, micro-batch 2 row")
    ap.add_argument("--pairs", default="1x1024,2x1024,8x1024,2x4096,8x4096", help="micro-batch x response length, comma-separated")
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8, help="responses per update")
    ap.add_argument("--chunk", type=int, default=256, help="LM-head rows per chunk on the 'after' path")
    ap.add_argument("--max-before-tokens", type=int, default=2048,
                    help="run the full-logits path only where micro-batch x response <= this (it needs ~22 B x vocab "
                         "per token: 2 x 4096 at 151,936 would be ~28 GB)")
    ap.add_argument("--ckpt", action="store_true", help="also run the chunked path with gradient checkpointing")
    ap.add_argument("--lora-probe", action="store_true", help="full vs LoRA vs QLoRA on the 4-layer 1.5B-shaped probe")
    ap.add_argument("--plan", action="store_true", help="component costs per Qwen2.5 size and mode, extrapolated to full depth")
    ap.add_argument("--sizes", default="0.5B,1.5B,3B,7B", help="--plan: Qwen2.5 sizes")
    ap.add_argument("--modes", default="full,lora,qlora", help="--plan: full, lora, qlora")
    ap.add_argument("--depths", default="1,2", help="--plan: the two reduced depths the per-layer slope comes from")
    ap.add_argument("--measured", default="", help="--plan: read the measured table from a previous --plan output")
    ap.add_argument("--gpu-measured", default="", help="--plan: bench/gpu.py's output; its rows at the plan's micro-batch "
                                                       "replace the CPU extrapolation")
    ap.add_argument("--plan-micro", type=int, default=2, help="--plan: micro-batch of the plan")
    ap.add_argument("--plan-prompt", type=int, default=256, help="--plan: prompt tokens of the plan")
    ap.add_argument("--plan-resp", type=int, default=1024, help="--plan: response tokens of the plan")
    ap.add_argument("--plan-kv-tokens", type=int, default=65536, help="--plan: vLLM KV-cache tokens in flight")
    ap.add_argument("--max-full-gb", type=float, default=12, help="--plan: skip full fine-tuning above this (the machine's RAM)")
    ap.add_argument("--rank", type=int, default=16, help="--lora-probe / --plan: LoRA rank")
    ap.add_argument("--prompt", type=int, default=64, help="--lora-probe / --plan: prompt tokens")
    ap.add_argument("--base-dtype", default="float32", choices=["float32", "bfloat16"],
                    help="--lora-probe / --plan: the frozen base's dtype (bfloat16 = a GPU's bf16-mixed LoRA run)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-real", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--size", default="1.5B", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="full", help=argparse.SUPPRESS)
    ap.add_argument("--micro", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--resp", type=int, default=1024, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    if a.child_real:
        return child_real(a)
    if a.lora_probe or a.plan:
        a.layers = 4 if a.layers == 2 and a.lora_probe else a.layers
        return lora_probe(a) if a.lora_probe else plan(a)
    pairs = [(2, 1024)] if a.probe else [tuple(int(x) for x in p.split("x")) for p in a.pairs.split(",")]
    print(f"random Qwen2: vocab {a.vocab}, hidden {a.hidden}, {a.layers} layers; batch {a.batch} responses, prompt 64 "
          f"tokens, one update; chunk {a.chunk} rows; load: {os.getloadavg()[0]:.2f}")
    paths = [("full logits", 0, False), (f"chunked ({a.chunk})", a.chunk, False)]
    if a.ckpt:
        paths.append((f"chunked + grad ckpt", a.chunk, True))
    print(f"| micro-batch x response | path | peak RSS MB | before update MB | update MB | update s |")
    print("|---|---|---|---|---|---|")
    for micro, resp in pairs:
        for name, chunk, ckpt in paths:
            if chunk == 0 and micro * resp > a.max_before_tokens:
                print(f"| {micro} x {resp} | {name} | not run (--max-before-tokens) | | | |", flush=True)
                continue
            r = run_one(a, micro, resp, chunk, ckpt)
            if "error" in r:
                print(f"| {micro} x {resp} | {name} | failed: {r['error']} | | | |", flush=True)
                continue
            print(f"| {micro} x {resp} | {name} | {r['peak_mb']:.0f} | {r['base_mb']:.0f} | {r['peak_mb'] - r['base_mb']:.0f} "
                  f"| {r['update_s']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
