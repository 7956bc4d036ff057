"""Where --rollout-lag's overlap is lost on CPU: generation beside an update, in a thread (what async_rollout.py does)
or in a spawned process (its own interpreter and weight copy), against each alone. Prints figures, asserts nothing.

    python bench/async_workers.py                 # the default run's shapes: 32 prompts x 8, 64 new tokens; ~2 min
    python bench/async_workers.py --rounds 5

Four measurements, one torch thread in every thread and process, the tiny model, the same prompts every round:
  alone      generation (the fast engine) with nothing else running; then the update (train.py's update_policy at its
             defaults: micro-batches, AdamW step, on 256 sampled responses) with nothing else running
  thread     generation in a second thread of this process while the main thread repeats updates (the producer)
  process    generation in a spawned process while this process repeats updates (a process worker)
Reported: seconds per generation and per update in each, and what the overlapped step would cost: max(gen, update)
against the synchronous gen + update. The slowdown of a thread that a process does not have is the GIL's (one
interpreter for both); what both have is the machine's (two cores' shared caches and memory bandwidth, other jobs).
"""
import argparse
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def load(seed=0):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tools import tiny
    from trainer import setup as trainer_setup

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    trainer_setup.quiet_libraries()
    path = tiny.get_tiny_model(verbose=False)
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def prompts_of(tok, n):
    from tasks.addition import builtin_task
    from tasks.templates import build_prompt

    return [build_prompt(tok, ex.prompt) for ex in builtin_task(n, "train", seed=0)]


def generate_rounds(model, tok, prompts, G, max_new, rounds, start=None):
    """Seconds per generation round (the fast engine, sampling at T 1)."""
    import torch

    import rollout
    from engines.hf import FastEngine

    engine = FastEngine(model, tok)
    sp = rollout.SamplingParams(temperature=1.0, max_new_tokens=max_new)
    if start is not None:
        start.wait()
    out = []
    for r in range(rounds):
        torch.manual_seed(r)
        t0 = time.perf_counter()
        engine.generate(prompts, G, sp)
        out.append(time.perf_counter() - t0)
    return out


def child(args, start, q):
    model, tok = load()
    q.put("ready")
    q.put(generate_rounds(model, tok, prompts_of(tok, args.prompts), args.group_size, args.max_new_tokens, args.rounds, start))


def make_update(model, tok, prompts, G, max_new):
    """A closure running train.py's own update (step 5, default settings) on one fixed rollout batch (its responses
    sampled once, here; advantages random)."""
    import torch

    import config
    import rollout
    from engines.hf import FastEngine
    import train
    from trainer.records import UpdateBatch
    from trainer import distributed

    cfg = config.parse_config([])
    acc = distributed.make_accelerator(cfg)
    comps = [c for g in FastEngine(model, tok).generate(prompts, G, rollout.SamplingParams(max_new_tokens=max_new))
             for c in g]
    p_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts for _ in range(G)]
    r_ids = [c.token_ids for c in comps]
    adv = torch.randn(len(comps))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    model.train()

    def update():
        t0 = time.perf_counter()
        learner = types.SimpleNamespace(cfg=cfg, accelerator=acc, model=model, ref_model=None, optimizer=opt, tok=tok,
                                        ent_ctrl=None)
        train.update_policy(learner, UpdateBatch(p_ids, r_ids, adv, [c.truncated for c in comps]), 0.0, 0)
        return time.perf_counter() - t0

    return update


def updates_while(update, busy):
    times = []
    while busy():
        times.append(update())
    return times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=8, help="generation rounds per measurement")
    a = ap.parse_args(argv)
    import copy

    model, tok = load()
    prompts = prompts_of(tok, a.prompts)
    twin = copy.deepcopy(model).eval()
    update = make_update(model, tok, prompts, a.group_size, a.max_new_tokens)
    med = statistics.median
    print(f"{a.prompts} prompts x {a.group_size}, {a.max_new_tokens} new tokens, {a.rounds} rounds; 1 torch thread each; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)

    gen_alone = generate_rounds(twin, tok, prompts, a.group_size, a.max_new_tokens, a.rounds)
    upd_alone = [update() for _ in range(max(3, a.rounds))]

    res = {}
    done = threading.Event()
    box = {}
    th = threading.Thread(target=lambda: (box.setdefault("g", generate_rounds(twin, tok, prompts, a.group_size,
                                                                                a.max_new_tokens, a.rounds)), done.set()))
    th.start()
    upd_thread = updates_while(update, lambda: not done.is_set())
    th.join()
    res["thread"] = (box["g"], upd_thread)

    ctx = mp.get_context("spawn")
    start, q = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=child, args=(a, start, q))
    p.start()
    assert q.get(timeout=600) == "ready"
    start.set()
    result = {}
    reader = threading.Thread(target=lambda: result.setdefault("g", q.get(timeout=1200)))
    reader.start()
    upd_proc = updates_while(update, reader.is_alive)
    reader.join()
    p.join()
    res["process"] = (result["g"], upd_proc)

    g0, u0 = med(gen_alone), med(upd_alone)
    print("\n| worker | generation s (median) | update s (median) | updates run | overlapped step max(gen, update) s | "
          "vs synchronous gen + update |")
    print("|---|---|---|---|---|---|")
    print(f"| alone (synchronous) | {g0:.3f} | {u0:.3f} | {len(upd_alone)} | {g0 + u0:.3f} (gen + update) | 1.00x |")
    for name, (g, u) in res.items():
        gm, um = med(g), med(u) if u else float("nan")
        print(f"| {name} | {gm:.3f} ({gm / g0:.2f}x alone) | {um:.3f} ({um / u0:.2f}x alone) | {len(u)} | "
              f"{max(gm, um):.3f} | {(g0 + u0) / max(gm, um):.2f}x |")


if __name__ == "__main__":
    main()
