"""Driver for tests/test_fsdp.py: the pieces of train.py under FSDP2 (2 CPU processes, gloo) against 1 process.

    python tests/fsdp_step.py MODEL OUT.pt                                                  # 1 process, no sharding
    accelerate launch --multi_gpu --num_processes 2 tests/fsdp_step.py MODEL OUT.pt --fsdp  # FSDP2 over 2 processes

Through trainer.distributed.make_accelerator (the same Accelerate FSDP2 path as `train.py --fsdp`), on a fixed batch:
  * update: train.update_policy's loss and gradient (gathered to full tensors), `optimizer.step` replaced by a hook
    that records the gradient, as tests/mp_step.py does; processes hold whole groups (rank 0 three, rank 1 one:
    uneven micro-batch counts, so the lockstep padding is exercised);
  * weights for the vLLM sync: trainer.distributed.GatheredWeights (full tensors, HF names);
  * generation: greedy completions of this process's prompts from the sharded model (rank 1 has fewer prompts and
    stops earlier: HF's synced_gpus keeps it stepping);
  * checkpoint: runs.save_checkpoint after one real AdamW step, then its optimizer state loaded back.
Rank 0 saves everything; the test compares the files.
"""
from __future__ import annotations

import os
import sys
import types

import torch

torch.set_num_threads(1)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import config  # noqa: E402
import rollout  # noqa: E402
import runs  # noqa: E402
import train  # noqa: E402
from engines.loading import load_model  # noqa: E402
from tests.mp_step import G, fixed_batch  # noqa: E402
from trainer import distributed  # noqa: E402
from trainer.records import UpdateBatch  # noqa: E402


def main(model_path: str, out_path: str, fsdp: bool):
    from accelerate.utils import gather_object

    out_dir = os.path.dirname(out_path)
    cfg = config.Config(batch_size=16, group_size=G, mini_batch_size=16, micro_batch_size=4, lr=0.0, grad_clip=1e9,
                       max_new_tokens=12, fsdp=fsdp, output_dir=out_dir, loss_agg="token-mean")
    acc = distributed.make_accelerator(cfg)
    world, rank = acc.num_processes, acc.process_index
    assert distributed.is_sharded(acc) == fsdp and (not fsdp or acc.is_fsdp2)
    torch.manual_seed(0)
    model, tok = load_model(model_path, torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    model, optimizer = acc.prepare(model, optimizer)
    if fsdp:
        acc.unwrap_model(model)._is_fsdp_managed_module = True
    res = {"world": world, "sharded_types": sorted({type(p).__name__ for p in model.parameters()})}

    # weights for the engine sync: full tensors with checkpoint names
    res["weights"] = {n: p.detach().clone() for n, p in distributed.GatheredWeights(model).named_parameters()}

    # one update on a fixed batch, uneven shards (whole groups: 3 on rank 0, 1 on rank 1)
    p_all, r_all, adv_all, tr_all = fixed_batch(len(tok), tok.eos_token_id)
    split = [3, 1] if world == 2 else [4]
    sl = slice(sum(split[:rank]) * G, sum(split[: rank + 1]) * G)
    grads = []
    real_step = optimizer.step

    def record(*a, **k):
        grads.append(torch.cat([(p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).flatten().clone()
                                for p in model.parameters()]))

    optimizer.step = record
    for epochs, name in ((1, "mu1"), (2, "mu2")):  # mu = 2: the old log-probs pass is padded to lockstep too
        cfg.epochs = epochs
        grads.clear()
        learner = types.SimpleNamespace(cfg=cfg, accelerator=acc, model=model, ref_model=None, optimizer=optimizer, tok=tok, ent_ctrl=None)
        out = train.update_policy(learner, UpdateBatch(p_all[sl], r_all[sl], adv_all[sl], tr_all[sl]), 0.0, 0)
        loss = acc.gather(torch.tensor([out.metrics["policy/loss"]], dtype=torch.float64)).mean().item()
        res[name] = {"loss": loss, "grads": [g.clone() for g in grads], "updates": out.metrics["policy/updates"]}
    optimizer.step = real_step

    # generation from the sharded weights: rank 0 three prompts, rank 1 one
    prompts = [tok.decode(p) for p in p_all[:: G][:4]]
    mine = prompts[: split[0]] if rank == 0 else prompts[split[0] :]
    engine = rollout.make_engine("hf", acc.unwrap_model(model), tok)
    comps = engine.generate(mine, 1, rollout.SamplingParams(0.0, 1.0, cfg.max_new_tokens))
    res["generated"] = gather_object([c[0].text for c in comps])

    # checkpoint after one real optimizer step (lr > 0), then the optimizer state back
    for pg in optimizer.param_groups:
        pg["lr"] = 1e-2
    cfg.epochs = 1
    learner = types.SimpleNamespace(cfg=cfg, accelerator=acc, model=model, ref_model=None, optimizer=optimizer, tok=tok, ent_ctrl=None)
    train.update_policy(learner, UpdateBatch(p_all[sl], r_all[sl], adv_all[sl], tr_all[sl]), 0.0, 5)
    ck = os.path.join(out_dir, f"ckpt-{world}")
    runs.save_checkpoint(ck, acc, model, tok, optimizer, {"step": 1})
    acc.wait_for_everyone()
    res["after_step"] = {n: p.detach().clone() for n, p in distributed.GatheredWeights(model).named_parameters()}
    st = torch.load(os.path.join(ck, "trainer_state.pt"), weights_only=False)
    if fsdp:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict, set_optimizer_state_dict

        before = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        for s in optimizer.state.values():  # wipe, then load the checkpoint's state back
            for k in s:
                s[k] = s[k] * 0 if torch.is_tensor(s[k]) and s[k].dim() else s[k]
        set_optimizer_state_dict(model, optimizer, optim_state_dict=st["optimizer"], options=StateDictOptions(full_state_dict=True))
        after = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if acc.is_main_process:
            res["optimizer_roundtrip"] = all(torch.equal(before["state"][n][k], after["state"][n][k])
                                             for n in before["state"] for k in ("exp_avg", "exp_avg_sq"))
            res["optimizer_keys"] = len(before["state"])
    if acc.is_main_process:
        torch.save(res, out_path)
    acc.wait_for_everyone()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--fsdp" in sys.argv[3:])
    # The interpreter's teardown after FSDP2 on gloo aborted now and then on 2 busy cores ("terminate called without
    # an active exception", exit 134; as runs.py's Ctrl-C handler notes): the result is written, so leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
