"""Peak memory of one policy update with a real vocabulary: full logits (before) vs chunked LM head (after).

    python bench/memory.py                 # the table: Qwen2.5's vocabulary (151,936), a ~10M-parameter random Qwen2
    python bench/memory.py --probe         # one row: batch 8 x 1024 response tokens, micro-batch 2, both paths
    python bench/memory.py --pairs 2x1024,8x1024,2x4096 --vocab 151936 --hidden 64 --layers 2

Each configuration runs in a fresh subprocess (peak RSS is per process): build the random model (fp32, seeded) and
AdamW, then one update of a batch of 8 responses (prompt 64 tokens): micro-batches of forward + GRPO loss +
backward, one optimizer step, `policy/entropy` computed as train.py does. Printed: peak RSS of the whole process,
the RSS before the update (model, optimizer, Python, torch), and their difference, which is what the update costs.
CPU figures: on a GPU the same tensors are allocated, so the update's difference is the activation + logits
memory a GPU would need on top of weights, gradients and optimizer states (docs/multi_gpu.md, "Memory").
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the project is one folder up

import grpo  # noqa: E402
import train  # noqa: E402


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
        batch = train.make_batch(Tok, p_ids[i : i + a.micro], r_ids[i : i + a.micro], "cpu")
        logp, ent = train.response_logprobs(model, batch, 1.0, with_entropy=True, chunk_size=a.chunk)
        mask = batch[4]
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
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--micro", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--resp", type=int, default=1024, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
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
