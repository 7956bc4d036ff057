"""GRPO-family RL for math reasoning: one loop, driven by Accelerate, every knob on the command line.

    python train.py                                   # tiny model, built-in task, CPU: learns in minutes
    python train.py --model Qwen/Qwen2.5-Math-1.5B --train-data dapo_math_17k.parquet --eval-data math500.jsonl \
        --max-new-tokens 4096 --lr 1e-6 --batch-size 512 --mini-batch-size 512 --micro-batch-size 8
    accelerate launch --num_processes 8 train.py ...  # the same file on N processes (DDP), unchanged
    python train.py --help                            # every option, with its meaning

The loop (DeepSeekMath Alg. 1, as the seed papers run it), one iteration per `step`:
  1. sample B prompts                  (B = batch_size / group_size, sharded over processes, groups whole)
  2. generate G completions for each   (rollout.py: HF generate or vLLM)
  3. score them                        (reward.py: math-verify)
  4. group-relative advantages         (grpo.py)
  5. mu optimizer updates              (epochs x mini-batches of the rollout batch; old log-probs computed when mu > 1)
  6. log / evaluate / checkpoint

Run directory: metrics.jsonl (one row per step), curves.png, samples.jsonl (completions at each evaluation),
checkpoint-N/ (model, tokenizer, optimizer, RNG, step, data position; written atomically) and summary.json.
The surrogate loss is not a progress signal (it is ~0 on every on-policy step); watch reward and accuracy.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field

import torch

import data
import grpo
from rollout import SamplingParams


def opt(default, help):
    return field(default=default, metadata={"help": help})


@dataclass
class Config:
    # --- run ---
    model: str = opt("", "model path or hub name; empty = the built-in tiny Qwen2 (built offline and cached on first use)")
    train_data: str = opt("builtin", "'builtin' (the built-in task) or a .jsonl/.json/.parquet file or hub dataset name")
    eval_data: str = opt("builtin", "'builtin' (held-out split of the built-in task) or a file / hub dataset name")
    eval_split: str = opt("test", "split to use when --eval-data is a hub dataset")
    output_dir: str = opt("runs/default", "run directory (metrics, curves, samples, checkpoints, summary)")
    max_steps: int = opt(120, "number of RL steps (one step = one rollout batch)")
    seed: int = opt(0, "seed for data order, sampling and initialisation: same seed, same run")
    save_every: int = opt(0, "checkpoint every N steps (0 = only at the end)")
    resume: str = opt("", "checkpoint directory to resume from, or 'auto' for the latest one in --output-dir")
    eval_every: int = opt(40, "evaluate on held-out data every N steps (0 = only before and after)")
    eval_problems: int = opt(400, "number of held-out problems for greedy accuracy")
    # --- rollout ---
    rollout: str = opt("hf", "generation engine: 'hf' (transformers generate) or 'vllm'")
    batch_size: int = opt(256, "responses per step (prompts x group size); must be divisible by --group-size")
    group_size: int = opt(8, "G: completions per prompt (>= 2)")
    temperature: float = opt(1.0, "sampling temperature (all five papers use 1.0 for training)")
    top_p: float = opt(1.0, "nucleus sampling top-p for training rollouts")
    max_new_tokens: int = opt(64, "maximum response length in tokens (responses hitting it are 'truncated')")
    # --- reward ---
    correct_reward: float = opt(1.0, "reward of a correct answer")
    wrong_reward: float = opt(0.0, "reward of a wrong answer (-1 for DAPO / Compass-Thinker, 0 for Ring-lite / Skywork / MiMo)")
    reward_timeout: float = opt(5.0, "seconds allowed to verify one answer (a timeout scores 0)")
    reward_workers: int = opt(2, "processes verifying answers in parallel (0 = in the training process)")
    # --- loss ---
    loss_agg: str = opt("seq-mean-token-mean", "loss aggregation: seq-mean-token-mean (GRPO), token-mean (DAPO), seq-mean-token-sum")
    clip_low: float = opt(0.2, "eps_low: ratio clipped below at 1 - eps_low")
    clip_high: float = opt(0.2, "eps_high: ratio clipped above at 1 + eps_high (DAPO clip-higher: 0.28)")
    kl_coef: float = opt(0.0, "beta: weight of the k3 KL to the initial (reference) model; 0 = no reference model")
    scale_adv_by_std: bool = opt(True, "divide advantages by the group std (GRPO); off = Dr. GRPO's mean-only baseline")
    # --- optimisation ---
    lr: float = opt(2e-4, "AdamW learning rate (the papers use 1e-6 to 3e-6 for 7B-32B models)")
    warmup_steps: int = opt(5, "linear LR warm-up, in optimizer updates, then constant (DAPO)")
    weight_decay: float = opt(0.0, "AdamW weight decay")
    grad_clip: float = opt(1.0, "max global grad norm")
    mini_batch_size: int = opt(256, "responses per optimizer update; mu = epochs x batch_size / mini_batch_size")
    epochs: int = opt(1, "passes over each rollout batch (N_reuse)")
    micro_batch_size: int = opt(256, "responses per forward/backward (gradient accumulation inside a mini-batch)")
    dtype: str = opt("auto", "model weights dtype: auto (bfloat16 on GPU, float32 on CPU), float32, bfloat16")

    def validate(self):
        def bad(flag, msg):
            raise SystemExit(f"error: --{flag}: {msg}")

        if self.group_size < 2:
            bad("group-size", f"must be >= 2 (a group-relative baseline needs at least two samples), got {self.group_size}")
        if self.batch_size % self.group_size:
            bad("batch-size", f"{self.batch_size} is not divisible by --group-size {self.group_size}")
        if self.batch_size % self.mini_batch_size:
            bad("mini-batch-size", f"{self.mini_batch_size} does not divide --batch-size {self.batch_size}")
        if self.mini_batch_size % self.micro_batch_size and self.micro_batch_size < self.mini_batch_size:
            bad("micro-batch-size", f"{self.micro_batch_size} does not divide --mini-batch-size {self.mini_batch_size}")
        if self.loss_agg not in grpo.LOSS_AGG:
            bad("loss-agg", f"{self.loss_agg!r} is not one of {grpo.LOSS_AGG}")
        if self.max_steps < 1:
            bad("max-steps", "must be >= 1")
        if self.rollout not in ("hf", "vllm"):
            bad("rollout", f"{self.rollout!r} is not 'hf' or 'vllm'")


def parse_config(argv=None) -> Config:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        if f.type in ("bool", bool):
            ap.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=f.metadata["help"])
        else:
            typ = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
            ap.add_argument(flag, type=typ, default=f.default, help=f.metadata["help"] + f" (default: {f.default})")
    cfg = Config(**vars(ap.parse_args(argv)))
    cfg.validate()
    return cfg


# ------------------------------------------------------------------------------------------------
# Plumbing: data order, batches, log-probs, checkpoints
# ------------------------------------------------------------------------------------------------
class PromptSampler:
    """Walks the dataset in a fresh seeded permutation each epoch; (epoch, pos) is the resumable data position."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch, self.pos = n, seed, 0, 0
        self._perm = self._make_perm()

    def _make_perm(self):
        return random.Random(f"{self.seed}-{self.epoch}").sample(range(self.n), self.n)

    def take(self, k: int) -> list[int]:
        out = []
        while len(out) < k:
            if self.pos == self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._perm = self._make_perm()
            out.append(self._perm[self.pos])
            self.pos += 1
        return out

    def state_dict(self):
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, s):
        self.epoch, self.pos = s["epoch"], s["pos"]
        self._perm = self._make_perm()


def make_batch(tok, prompt_ids: list[list[int]], resp_ids: list[list[int]], device):
    """[left-pad | prompt | response | right-pad] rows with the response region aligned at column P.

    Returns input_ids, attention_mask, position_ids (B, P+R), response tokens (B, R) and their mask (B, R).
    Position ids count real tokens only, as `generate` does with left padding, so the trainer's log-probs are
    those of the sampled sequence.
    """
    P, R = max(map(len, prompt_ids)), max(1, max(map(len, resp_ids)))
    pad = tok.pad_token_id
    ids = torch.full((len(prompt_ids), P + R), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, (p, r) in enumerate(zip(prompt_ids, resp_ids)):
        ids[i, P - len(p) : P] = torch.tensor(p)
        ids[i, P : P + len(r)] = torch.tensor(r, dtype=torch.long)
        attn[i, P - len(p) : P + len(r)] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    resp_mask = attn[:, P:].clone()
    return ids.to(device), attn.to(device), pos.to(device), ids[:, P:].to(device), resp_mask.to(device), P


def response_logprobs(model, batch, temperature: float, with_entropy: bool = False):
    """Per-token log-probs (and entropy) of the response tokens: logits at t-1 predict token t."""
    ids, attn, pos, resp, _, P = batch
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits  # (N, P+R, V)
    return grpo.token_logprobs(logits[:, P - 1 : -1], resp, temperature, with_entropy)  # (N, R)


def save_checkpoint(path, accelerator, model, tok, optimizer, state: dict):
    """Written to a temporary directory and renamed: a crash never leaves half a checkpoint."""
    if not accelerator.is_main_process:
        return
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    accelerator.unwrap_model(model).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    torch.save(
        {"optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(), "py_rng": random.getstate(), **state},
        os.path.join(tmp, "trainer_state.pt"),
    )
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def latest_checkpoint(output_dir: str) -> str | None:
    cks = [d for d in os.listdir(output_dir) if d.startswith("checkpoint-") and not d.endswith(".tmp")] if os.path.isdir(output_dir) else []
    return os.path.join(output_dir, max(cks, key=lambda d: int(d.split("-")[1]))) if cks else None


def load_model(path: str, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as e:
        where = "local directory" if os.path.isdir(path) else "local directory or reachable hub model"
        raise SystemExit(f"error: --model {path!r}: cannot load a model from it (not a {where}): {str(e).splitlines()[0]}")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok


def plot_curves(rows: list[dict], evals: list[dict], path: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [("reward/mean", "train reward"), ("rollout/accuracy", "train accuracy"), ("rollout/response_length", "response length"),
            ("policy/entropy", "entropy"), ("rollout/frac_zero_std", "zero-std groups"), ("perf/grad_norm", "grad norm")]
    fig, axes = plt.subplots(2, 4, figsize=(16, 6.5))
    steps = [r["step"] for r in rows]
    for ax, (k, title) in zip(axes.flat, keys):
        ax.plot(steps, [r.get(k, float("nan")) for r in rows])
        ax.set_title(title), ax.set_xlabel("step")
    ax = axes.flat[6]
    ax.plot([e["step"] for e in evals], [e["eval/accuracy"] for e in evals], "o-")
    ax.set_title("held-out greedy accuracy"), ax.set_xlabel("step"), ax.set_ylim(0, 1)
    axes.flat[7].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
def main(argv=None):
    cfg = parse_config(argv)
    # Everything that can fail on bad input is checked before the run directory is touched.
    train_set = data.load_dataset(cfg.train_data, split="train", seed=cfg.seed)
    eval_set = data.load_dataset(cfg.eval_data, split=cfg.eval_split if cfg.eval_data != "builtin" else "test",
                                 n=cfg.eval_problems, seed=cfg.seed)
    resume_from = None
    if cfg.resume:
        resume_from = latest_checkpoint(cfg.output_dir) if cfg.resume == "auto" else cfg.resume
        if cfg.resume != "auto" and not os.path.exists(os.path.join(cfg.resume, "trainer_state.pt")):
            raise SystemExit(f"error: --resume {cfg.resume!r}: not a checkpoint directory (no trainer_state.pt)")

    from accelerate import Accelerator
    from tqdm import tqdm

    import rollout
    import tiny
    from evaluate import evaluate
    from reward import MathReward

    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed + accelerator.process_index)  # per-process sampling streams
    dtype = {"auto": torch.bfloat16 if torch.cuda.is_available() else torch.float32, "float32": torch.float32,
             "bfloat16": torch.bfloat16}[cfg.dtype]
    model_path = cfg.model or tiny.get_tiny_model(verbose=accelerator.is_main_process)
    model, tok = load_model(resume_from or model_path, dtype)
    ref_model = load_model(model_path, dtype)[0].eval().requires_grad_(False) if cfg.kl_coef > 0 else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    model, optimizer = accelerator.prepare(model, optimizer)
    if ref_model is not None:
        ref_model = ref_model.to(accelerator.device)
    policy = accelerator.unwrap_model(model)
    engine = rollout.make_engine(cfg.rollout, policy, tok)
    reward_fn = MathReward(cfg.correct_reward, cfg.wrong_reward, cfg.reward_timeout, cfg.reward_workers)
    sampler = PromptSampler(len(train_set), cfg.seed)
    start_step, history, evals, wall_before = 0, [], [], 0.0
    if resume_from:
        st = torch.load(os.path.join(resume_from, "trainer_state.pt"), weights_only=False)
        optimizer.load_state_dict(st["optimizer"])
        torch.set_rng_state(st["torch_rng"]), random.setstate(st["py_rng"]), sampler.load_state_dict(st["sampler"])
        start_step, history, evals, wall_before = st["step"], st["history"], st["evals"], st["wall_time_s"]
    os.makedirs(cfg.output_dir, exist_ok=True)
    if accelerator.is_main_process:
        with open(os.path.join(cfg.output_dir, "config.json"), "w") as f:
            json.dump(dataclasses.asdict(cfg), f, indent=1)
        with open(os.path.join(cfg.output_dir, "metrics.jsonl"), "w") as f:  # rewritten from the checkpoint's history
            f.writelines(json.dumps(r) + "\n" for r in history)

    world, rank = accelerator.num_processes, accelerator.process_index
    G = cfg.group_size
    B_local = cfg.batch_size // G // world  # prompts per process; groups never straddle processes
    if B_local * G * world != cfg.batch_size:
        raise SystemExit(f"error: --batch-size {cfg.batch_size} does not split into whole groups over {world} processes")
    sp = SamplingParams(cfg.temperature, cfg.top_p, cfg.max_new_tokens)

    def run_eval(step):
        if not accelerator.is_main_process:
            return None
        with torch.random.fork_rng():  # evaluation never shifts the training sampling stream
            res = evaluate(engine, tok, eval_set, reward_fn, max_new_tokens=cfg.max_new_tokens, n_show=8)
        with open(os.path.join(cfg.output_dir, "samples.jsonl"), "a") as f:
            f.writelines(json.dumps({"step": step, **s}) + "\n" for s in res.pop("samples"))
        row = {"step": step, **{f"eval/{k}": v for k, v in res.items()}}
        evals.append(row)
        return row

    t_start = time.time()
    if not evals:
        print(f"evaluating the initial policy on {len(eval_set)} held-out problems ...", flush=True) if accelerator.is_main_process else None
        run_eval(0)
    bar = tqdm(range(start_step, cfg.max_steps), initial=start_step, total=cfg.max_steps, disable=not accelerator.is_main_process, dynamic_ncols=True)
    for step in bar:
        t0 = time.time()
        # 1. sample prompts: every process draws the same global batch and keeps its own slice of whole groups
        idx = sampler.take(cfg.batch_size // G)[rank * B_local : (rank + 1) * B_local]
        exs = [train_set[i] for i in idx]
        prompts = [data.build_prompt(tok, ex.prompt) for ex in exs]
        # 2. rollout: G completions per prompt
        groups = engine.generate(prompts, G, sp)
        comps = [c for g in groups for c in g]  # (N,) prompt-major: group i is comps[i*G:(i+1)*G]
        t_gen = time.time() - t0
        # 3. rewards
        rewards, correct, rmetrics = reward_fn([c.text for c in comps], [ex.answer for ex in exs for _ in range(G)])
        rewards_t = torch.tensor(rewards)
        # 4. group-relative advantages (each group lives on one process, so this is exact)
        adv = grpo.group_advantages(rewards_t, G, scale_by_std=cfg.scale_adv_by_std)  # (N,)
        # 5. mu optimizer updates over mini-batches of the rollout batch
        p_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts for _ in range(G)]
        umetrics = update_policy(cfg, accelerator, model, ref_model, optimizer, tok, p_ids, [c.token_ids for c in comps], adv, step)
        engine.sync_weights(policy)
        # 6. log / evaluate / save
        stats = accelerator.gather(torch.tensor(
            [sum(rewards), sum(r * r for r in rewards), sum(correct), len(rewards), sum(c.length for c in comps),
             max(c.length for c in comps), sum(c.truncated for c in comps), rmetrics["reward/timeouts"],
             float((rewards_t.view(-1, G).std(1) == 0).sum()), len(groups)], dtype=torch.float64).to(accelerator.device)
        ).view(world, -1).cpu()
        s = stats.sum(0)
        s[5] = stats[:, 5].max()
        n = s[3].item()
        dt = time.time() - t0
        row = {"step": step + 1, "reward/mean": s[0].item() / n, "reward/std": math.sqrt(max(0.0, s[1].item() / n - (s[0].item() / n) ** 2)),
               "rollout/accuracy": s[2].item() / n, "rollout/frac_zero_std": s[8].item() / s[9].item(),
               "rollout/response_length": s[4].item() / n, "rollout/response_length_max": s[5].item(),
               "rollout/truncated_frac": s[6].item() / n, "reward/timeouts": int(s[7].item()), **umetrics,
               "perf/tokens_per_s": s[4].item() / dt, "perf/step_time_s": dt, "perf/gen_time_s": t_gen}
        history.append(row)
        bar.set_postfix(reward=f"{row['reward/mean']:.3f}", acc=f"{row['rollout/accuracy']:.3f}", len=f"{row['rollout/response_length']:.1f}")
        done = step + 1 == cfg.max_steps
        if cfg.eval_every and (step + 1) % cfg.eval_every == 0 and not done:
            e = run_eval(step + 1)
            if e:
                bar.write(f"step {step + 1}: held-out greedy accuracy {e['eval/accuracy']:.3f}")
        if accelerator.is_main_process:
            with open(os.path.join(cfg.output_dir, "metrics.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")
        if done or (cfg.save_every and (step + 1) % cfg.save_every == 0):
            save_checkpoint(os.path.join(cfg.output_dir, f"checkpoint-{step + 1}"), accelerator, model, tok, optimizer,
                            {"step": step + 1, "sampler": sampler.state_dict(), "history": history, "evals": evals,
                             "wall_time_s": wall_before + time.time() - t_start, "config": dataclasses.asdict(cfg)})
    bar.close()
    run_eval(cfg.max_steps)
    reward_fn.close()
    if accelerator.is_main_process:
        before, after = evals[0], evals[-1]
        summary = {"accuracy_before": before["eval/accuracy"], "accuracy_after": after["eval/accuracy"],
                   "wall_time_s": wall_before + time.time() - t_start, "steps": cfg.max_steps,
                   "eval_problems": len(eval_set), "before": before, "after": after}
        with open(os.path.join(cfg.output_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        plot_curves(history, evals, os.path.join(cfg.output_dir, "curves.png"))
        print(f"held-out greedy accuracy: {summary['accuracy_before']:.3f} -> {summary['accuracy_after']:.3f} "
              f"({len(eval_set)} problems, {summary['wall_time_s']:.0f}s); run directory: {cfg.output_dir}")
    accelerator.wait_for_everyone()
    return history


def update_policy(cfg, accelerator, model, ref_model, optimizer, tok, p_ids, r_ids, adv, step) -> dict:
    """Step 5: `epochs` passes over the rollout batch in mini-batches; one optimizer update per mini-batch.

    Normalisers are global: a mini-batch's sequence and token counts are summed over its micro-batches and
    over processes, and each micro-batch loss is divided by them (times the world size, because DDP averages
    gradients over processes). Gradient accumulation therefore reproduces the one-big-batch gradient exactly.
    """
    device, world = accelerator.device, accelerator.num_processes
    N = len(r_ids)
    n_mini = max(1, cfg.mini_batch_size // world)  # per-process share of a mini-batch
    n_micro = min(cfg.micro_batch_size, n_mini)
    mu = cfg.epochs * (N // n_mini)
    old_logp = None  # per response: log pi_old of its tokens, (len_i,)
    if mu > 1:  # off-policy updates need pi_old of the sampled tokens; with mu == 1 it is logp.detach()
        old_logp = []
        with torch.no_grad():
            for i in range(0, N, n_micro):
                lp = response_logprobs(model, make_batch(tok, p_ids[i:i + n_micro], r_ids[i:i + n_micro], device), cfg.temperature)[0]
                old_logp += [lp[j, : len(r_ids[i + j])] for j in range(lp.shape[0])]
    g = torch.Generator().manual_seed(cfg.seed * 100003 + step)
    agg = {"loss": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "kl": 0.0, "entropy": 0.0, "grad_norm": 0.0}
    n_upd = 0
    for _ in range(cfg.epochs):
        order = torch.randperm(N, generator=g).tolist() if mu > 1 else list(range(N))
        for m0 in range(0, N, n_mini):
            mb = order[m0 : m0 + n_mini]
            seqs, toks = torch.tensor([float(len(mb))]), torch.tensor([float(sum(len(r_ids[i]) for i in mb))])
            seqs, toks = accelerator.reduce(seqs.to(device), "sum").item() / world, accelerator.reduce(toks.to(device), "sum").item() / world
            stats = []
            for c0 in range(0, len(mb), n_micro):
                mc = mb[c0 : c0 + n_micro]
                batch = make_batch(tok, [p_ids[i] for i in mc], [r_ids[i] for i in mc], device)
                last = c0 + n_micro >= len(mb)
                with accelerator.no_sync(model) if not last else contextlib.nullcontext():  # all-reduce once per update
                    logp, ent = response_logprobs(model, batch, cfg.temperature, with_entropy=True)  # (n, R)
                    mask = batch[4]  # (n, R)
                    if old_logp is None:
                        old = logp.detach()  # ratio == 1: the gradient is A * grad log pi (REINFORCE)
                    else:
                        old = torch.zeros_like(logp)
                        for j, i in enumerate(mc):
                            old[j, : len(r_ids[i])] = old_logp[i]
                    ref = None
                    if ref_model is not None:
                        with torch.no_grad():
                            ref = response_logprobs(ref_model, batch, cfg.temperature)[0]
                    loss, m = grpo.policy_loss(logp, old, adv[mc].to(device), mask, ref, clip_low=cfg.clip_low, clip_high=cfg.clip_high,
                                               kl_coef=cfg.kl_coef, loss_agg=cfg.loss_agg, num_seqs=seqs, num_tokens=toks)
                    accelerator.backward(loss)
                ntok = mask.sum().item()
                stats.append((loss.item(), m, (ent * mask).sum().item(), ntok))
            gn = accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            for pg in optimizer.param_groups:
                pg["lr"] = cfg.lr * min(1.0, (step * mu + n_upd + 1) / max(1, cfg.warmup_steps))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            T = sum(s[3] for s in stats) or 1
            agg["loss"] += sum(s[0] for s in stats)
            for k in ("clip_frac_low", "clip_frac_high", "kl"):
                agg[k] += sum(s[1][k] * s[3] for s in stats) / T
            agg["entropy"] += sum(s[2] for s in stats) / T
            agg["grad_norm"] += float(gn)
            n_upd += 1
    out = {f"policy/{k}" if k != "grad_norm" else "perf/grad_norm": v / n_upd for k, v in agg.items()}
    out["policy/updates"] = n_upd
    out["perf/lr"] = optimizer.param_groups[0]["lr"]
    return out


if __name__ == "__main__":
    main()
