"""Driver for tests/test_multiprocess.py: one `train.update_policy` call on a fixed batch, on 1 or N processes.

    python tests/mp_step.py MODEL OUT.pt                                      # 1 process, the whole batch
    accelerate launch --cpu --num_processes 2 tests/mp_step.py MODEL OUT.pt   # 2 processes, whole groups each

The batch (prompt / response token ids, advantages) is built from a fixed seed, identical on every process; each
process keeps its shard of whole groups, as train.py does. `optimizer.step` is replaced by a hook that records the
(DDP-averaged) gradient instead of updating, so every case starts from the same weights. Rank 0 saves, per case,
the global loss (the mean over processes of update_policy's `policy/loss`, which each process normalises by the
global counts times the world size) and the flattened gradient. The test compares the files.
"""
from __future__ import annotations

import os
import sys
import types

import torch

torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import config  # noqa: E402
import train  # noqa: E402
from engines.loading import load_model  # noqa: E402
from trainer.records import UpdateBatch  # noqa: E402

N_GROUPS, G = 4, 4
# name: (loss_agg, micro_batch_size, groups per process (None = even split), overlong_filter)
CASES = {
    "token-mean/micro4": ("token-mean", 4, None, False),
    "seq-mean-token-mean/micro4": ("seq-mean-token-mean", 4, None, False),
    "token-mean/micro16": ("token-mean", 16, None, False),
    "seq-mean-token-sum/micro2": ("seq-mean-token-sum", 2, None, False),
    "token-mean/micro4/overlong-filter": ("token-mean", 4, None, True),
    # uneven shards (as after rejection sampling): rank 0 holds 3 groups (3 micro-batches), rank 1 one group
    "seq-mean-token-mean/uneven": ("seq-mean-token-mean", 4, [3, 1], False),
    "token-mean/uneven": ("token-mean", 4, [3, 1], False),
}


def fixed_batch(vocab: int, eos: int):
    g = torch.Generator().manual_seed(1234)
    p_ids, r_ids, trunc = [], [], []
    for _ in range(N_GROUPS):
        p = torch.randint(5, vocab, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist()
        for _ in range(G):
            n = int(torch.randint(1, 13, (1,), generator=g))
            r = torch.randint(5, vocab, (n,), generator=g).tolist()
            t = bool(torch.rand(1, generator=g) < 0.3)
            p_ids.append(p)
            r_ids.append(r if t else r + [eos])
            trunc.append(t)
    adv = torch.randn(N_GROUPS * G, generator=g)
    return p_ids, r_ids, adv, trunc


def main(model_path: str, out_path: str):
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    world, rank = acc.num_processes, acc.process_index
    torch.manual_seed(0)
    model, tok = load_model(model_path, torch.float32)
    model.config.use_cache = False
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    model, optimizer = acc.prepare(model, optimizer)
    model.train()
    params = [p for p in acc.unwrap_model(model).parameters()]
    grads = []
    optimizer.step = lambda *a, **k: grads.append(torch.cat([p.grad.detach().flatten().clone() for p in params]))

    p_all, r_all, adv_all, tr_all = fixed_batch(len(tok), tok.eos_token_id)
    results = {}
    for name, (agg, micro, split, ofilter) in CASES.items():
        split = split if (split and world == len(split)) else [N_GROUPS // world] * world
        lo = sum(split[:rank]) * G
        hi = lo + split[rank] * G
        sl = slice(lo, hi)
        cfg = config.Config(batch_size=N_GROUPS * G, group_size=G, mini_batch_size=N_GROUPS * G, micro_batch_size=micro,
                           loss_agg=agg, lr=0.0, grad_clip=1e9, overlong_filter=ofilter, max_new_tokens=16)
        grads.clear()
        learner = types.SimpleNamespace(cfg=cfg, accelerator=acc, model=model, ref_model=None, optimizer=optimizer, tok=tok, ent_ctrl=None)
        out = train.update_policy(learner, UpdateBatch(p_all[sl], r_all[sl], adv_all[sl], tr_all[sl]), 0.0, 0)
        loss = acc.gather(torch.tensor([out.metrics["policy/loss"]], dtype=torch.float64)).mean().item()
        assert len(grads) == 1, f"{name}: {len(grads)} optimizer steps"
        results[name] = {"loss": loss, "grad": grads[0], "updates": out.metrics["policy/updates"]}
    if acc.is_main_process:
        torch.save({"world": world, "cases": results}, out_path)
    acc.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
