"""GRPO-family RL for math reasoning: one loop, driven by Accelerate, every knob on the command line (config.py).

    python train.py                                   # tiny model, built-in task, CPU: learns in minutes
    bash examples/qwen2.5-0.5b-instruct-gsm8k.sh      # a real model on one GPU (examples/: the runs and their settings)
    accelerate launch --num_processes 8 train.py ...  # the same file on N processes (DDP), unchanged
    python train.py --output-dir runs/default --resume auto   # continue a run (its settings come from its checkpoint)
    python train.py --recipe dapo --output-dir runs/dapo   # a paper's recipe (grpo dapo c3po skywork mimo compass gspo cispo)
    python train.py --reward code-soft --train-data builtin-code --output-dir runs/code   # code RL, built-in code task
    python train.py --recipe c3po --output-dir runs/c3po   # Ring-lite: math, then code, in one run (--stages)
    python train.py --help                            # every option, with its meaning

The loop (DeepSeekMath Alg. 1, as the seed papers run it), one iteration per `step`; `train()` below is the loop and
each step's function follows it, in this order:
  1. sample B prompts                  (B = batch_size / group_size, sharded over processes, groups whole; the task's
                                        sampler: MiMo's easy pool resample.py, staged difficulty curriculum.py)
  2. generate G completions for each   (rollout.py: HF generate, a fast decode loop or vLLM)
  3. score them                        (reward.py: math-verify; coding/: sandboxed tests; DAPO's overlong shaping
                                        and dynamic sampling, 1-3 repeated until B groups of mixed correctness are
                                        kept: dapo.py; MiMo's seamless rollout: seamless.py)  -> a Rollout
  4. group-relative advantages         (the recipe's idea file, --algorithm: grpo.py, dapo.py, c3po.py, gspo.py or
                                        cispo.py; Skywork's rejection sampling: curriculum.py)
  5. mu optimizer updates              (epochs x mini-batches; the idea file's policy_loss; DAPO's overlong filter:
                                        dapo.py; C3PO's token budget: c3po.py; entropy bonus: entropy.py)  -> an Update
  6. sync the engine, log / evaluate / checkpoint

Which idea file each recipe runs (--algorithm; config.RECIPES): grpo -> grpo.py; dapo, mimo, compass -> dapo.py (their
papers' "DAPO-style" loss: clip-higher, token-level loss, dynamic sampling); skywork -> dapo.py (Skywork-OR1's
Eq. 3.1 is DAPO's token-level loss, with a symmetric eps); c3po -> c3po.py (the token budget and its 1/Phi); gspo ->
gspo.py (GSPO's sequence ratio); cispo -> cispo.py (MiniMax-M1's capped, detached weight).

What this file leaves out, each in a file of its own: the flags and the recipes (config.py); the records passed
between the steps (trainer/records.py); the prompt order and its state (trainer/samplers.py); the rounds of dynamic
sampling and the seamless scheduler over N processes (trainer/collect.py); --rollout-lag's producer (async_rollout.py,
trainer/producer.py); token rows and micro-batches (trainer/batches.py); the chunked log-probs (trainer/logprobs.py);
DDP / FSDP lockstep and sharding (trainer/distributed.py); metric sums, summary and curves (trainer/metrics.py);
set-up, checkpoints and the run directory (trainer/setup.py, trainer/checkpoints.py, runs.py); LoRA (trainer/lora.py).

Run directory (--output-dir, one run each; runs.py: checkpoints, resume, Ctrl-C): config.json, metrics.jsonl (a row per
step), evals.jsonl (a row per evaluation), samples.jsonl (completions at each evaluation), curves.png, summary.json,
checkpoint-N/ (model, tokenizer, optimizer, RNG, step, data position; written atomically; the newest 2 kept).
The surrogate loss is not a progress signal (it is ~0 on every on-policy step); watch reward and accuracy.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import torch

import c3po
import cispo
import curriculum
import dapo
import data
import entropy
import grpo
import gspo
import runs
from config import Config, parse_config
from rollout import tis_weights
from runs import is_sharded
from trainer import lora
from trainer.batches import make_batch, old_logprobs, pad_rows, split_micro
from trainer.checkpoints import checkpoint
from trainer.collect import Collector, observe
from trainer.distributed import GatheredWeights, dummy_forward, lockstep
from trainer.logprobs import response_logprobs
from trainer.metrics import UpdateLog, step_stats, write_summary
from trainer.producer import take_lagged
from trainer.records import Advantages, Rollout, StepPlan, Update
from trainer.setup import Run, quiet_libraries, setup


def main(argv=None):
    """Parse, set up, train; Ctrl-C ends it with one line and exit status 130 (runs.interrupted)."""
    quiet_libraries()
    cfg = parse_config(argv, __doc__)
    run = None
    try:
        run = setup(cfg)  # everything that can fail on bad input is checked before the run directory is touched
        return train(run)
    except KeyboardInterrupt:  # the producer thread and the reward workers are stopped before the line
        runs.interrupted(cfg.output_dir, run.step if run else None, cfg.max_steps, "LOCAL_RANK" in os.environ,
                         stop=[run.producer, *(t.reward_fn for t in run.tasks)] if run else ())


# ------------------------------------------------------------------------------------------------
# The loop
# ------------------------------------------------------------------------------------------------
def train(run: Run) -> list[dict]:
    """The loop: steps 1-6 from the checkpoint's step (or 0) to --max-steps, then the final evaluation."""
    cfg, acc, collector, t_start = run.cfg, run.accelerator, Collector(run), time.time()
    if not run.evals:
        if acc.is_main_process:
            print(f"evaluating the initial policy on {' + '.join(str(len(t.eval_set)) for t in run.tasks)} held-out problems ...",
                  flush=True)
        run_eval(run, 0, sampled=True)
    elif due(cfg.eval_every, run.start_step) and run.evals[-1]["step"] < run.start_step:
        run_eval(run, run.start_step)  # a finished run extended (a larger --max-steps): the evaluation its last step
        # would have had if the run had been this long (its final one, with avg@k, is not the uninterrupted run's)
    bar = runs.progress_bar(range(run.start_step, cfg.max_steps), initial=run.start_step, total=cfg.max_steps,
               disable=not acc.is_main_process, dynamic_ncols=True)
    for step in bar:
        t0, run.step = time.time(), step

        # 1-3. sample prompts, generate G completions each, score them (dynamic sampling: until the batch is full);
        # --rollout-lag 1: the producer made this batch with the previous weights while the last update ran
        plan = run.plan(step)  # this step's stage, task, G, B and lengths (--stages, curricula)
        ro = collect(run, collector, plan)
        t_gen = time.time() - t0
        ro.metrics.update(observe(run, plan, ro, step))  # every group's pass rate -> MiMo's easy pool / online filter
        if run.producer and step + 1 < cfg.max_steps:  # sync point: theta_step to the producer, for batch step + 1
            ro.metrics["async/producer_idle_s"] = run.producer.start(step + 1, acc.unwrap_model(run.model), version=step)

        # 4. group-relative advantages (Skywork's rejection sampling drops zero-advantage groups)
        adv = advantages(cfg, ro)

        # 5. mu optimizer updates over mini-batches of the rollout batch, then the engine takes the new weights
        upd = update(run, ro, adv, step)

        # 6. log, evaluate, checkpoint
        row = log_step(run, plan, ro, upd, t0, t_gen)
        bar.set_postfix(reward=f"{row['reward/mean']:.3f}", acc=f"{row['rollout/accuracy']:.3f}",
                        len=f"{row['rollout/response_length']:.1f}")
        evaluate_and_save(run, step, bar, t_start)
    bar.close()
    return finish(run, collector, t_start)


# ------------------------------------------------------------------------------------------------
# Steps 1-3: prompts -> G completions each -> rewards (trainer/collect.py: plain, dynamic sampling, seamless)
# ------------------------------------------------------------------------------------------------
def collect(run: Run, collector: Collector, plan: StepPlan) -> Rollout:
    """The step's scored batch on this process: collected now, or with --rollout-lag made by the producer while the
    previous update ran. Dynamic sampling that cannot fill the batch ends the run with one line."""
    try:
        return take_lagged(run, plan.step) if run.producer else collector.collect(plan)
    except dapo.DynamicSamplingExhausted as e:  # the data is too easy or too hard for the model: one line
        raise SystemExit(f"error: step {plan.step + 1}: {e}") from None


# ------------------------------------------------------------------------------------------------
# Step 4: advantages
# ------------------------------------------------------------------------------------------------
def algorithm(cfg: Config):
    """The idea file the run's advantages and policy loss come from: grpo.py, dapo.py, c3po.py, gspo.py or cispo.py
    (--algorithm)."""
    return {"grpo": grpo, "dapo": dapo, "c3po": c3po, "gspo": gspo, "cispo": cispo}[cfg.algorithm]


def advantages(cfg: Config, ro: Rollout) -> Advantages:
    """Group-relative advantages (a group lives on one process, so this is exact) and the responses kept."""
    G = ro.group_size
    values = algorithm(cfg).group_advantages(torch.tensor(ro.rewards, dtype=torch.float64), G,
                                             scale_by_std=cfg.scale_adv_by_std)  # (N,)
    keep = torch.ones(len(ro.completions), dtype=torch.bool)
    if cfg.rejection_sampling:  # Skywork-OR1 Sec. 3.1: zero-advantage groups leave, nothing replaces them (on the
        # rewards, so partial-credit groups with different scores stay whatever --filter-metric says)
        keep = curriculum.reject_zero_advantage(values, G).repeat_interleave(G)
        ro.metrics["rollout/groups_kept_frac"] = keep.float().mean().item()
    return Advantages(values, keep)


# ------------------------------------------------------------------------------------------------
# Step 5: the policy update
# ------------------------------------------------------------------------------------------------
def update(run: Run, ro: Rollout, adv: Advantages, step: int) -> Update:
    """Step 5 on the kept responses: this step's entropy coefficient, mu optimizer updates, the engine's new weights."""
    cfg, tok, G = run.cfg, run.tok, ro.group_size
    sel = adv.keep.nonzero().flatten().tolist()
    p_ids = [tok(ro.prompts[i // G], add_special_tokens=False)["input_ids"] for i in sel]
    r_ids = [ro.completions[i].token_ids for i in sel]
    alpha = entropy_coef(run, p_ids, r_ids, ro.metrics)  # Ring-lite's constant or Skywork-OR1's alpha_k
    # truncated IS: the engine's sampling log-probs (vLLM), or with --rollout-lag log pi_behav, the producer's
    engine_lp = [(ro.behav_logp or [c.logprobs for c in ro.completions])[i] for i in sel] if cfg.tis_cap else None
    if cfg.vllm_sleep and hasattr(run.engine, "sleep"):  # colocated on one GPU: give training the KV-cache memory
        run.engine.sleep()  # sync_weights / generate wake it up again
    upd = update_policy(cfg, run.accelerator, run.model, run.ref_model, run.optimizer, tok, p_ids, r_ids, adv.values[sel],
                        [ro.completions[i].truncated for i in sel], alpha, step, engine_lp)
    if upd.sampled_nll is not None:
        run.last_nll = upd.sampled_nll
    weights = (GatheredWeights(run.model) if is_sharded(run.accelerator) and cfg.rollout == "vllm"
               else run.accelerator.unwrap_model(run.model))
    run.engine.sync_weights(lora.engine_view(weights, cfg) if cfg.lora_rank else weights)
    return upd


def entropy_coef(run: Run, p_ids, r_ids, extra: dict) -> float:
    """This step's entropy coefficient: Ring-lite's constant, or Skywork-OR1's adaptive alpha_k (entropy.py).

    --entropy-timing code (Skywork's released trainer updates its controller after the actor update): the controller
    is fed the previous rollout's sampled-token NLL e_{k-1}, updates c, then step k uses c_k * 1{e_{k-1} < tgt}; at
    step 0 there is no estimate and alpha_0 = 0 (c_0 = 0). --entropy-timing paper (Eq. 3.2): e_k is this rollout's
    NLL under pi_old, measured here by one extra forward pass over the kept responses (all processes' tokens), and
    alpha_k = c_k * 1{e_k <= tgt} is used before c_{k+1} is computed. No kept response (rejection sampling): alpha 0,
    the controller does not move.
    """
    ctrl = run.ent_ctrl
    if ctrl is None:
        return run.cfg.entropy_coef
    e = rollout_nll(run, p_ids, r_ids) if run.cfg.entropy_timing == "paper" else run.last_nll
    if e is None:
        extra["policy/entropy_coef"] = 0.0
        return 0.0
    alpha = ctrl.step(e)
    extra.update(ctrl.metrics())
    return alpha


def rollout_nll(run: Run, p_ids, r_ids) -> float | None:
    """-mean log pi_old over the response tokens of every process's kept responses (Skywork's entropy estimate)."""
    lps = old_logprobs(run.cfg, run.model, run.tok, p_ids, r_ids, run.accelerator.device) if r_ids else []
    t = torch.tensor([-sum(lp.sum().item() for lp in lps), float(sum(len(lp) for lp in lps))], dtype=torch.float64)
    nll_sum, n_tokens = run.accelerator.reduce(t.to(run.accelerator.device), "sum").tolist()
    return nll_sum / n_tokens if n_tokens else None


def update_policy(cfg, accelerator, model, ref_model, optimizer, tok, p_ids, r_ids, adv, truncated, alpha, step,
                  engine_lp=None) -> Update:
    """`epochs` passes over the rollout batch, each split into batch_size / mini_batch_size mini-batches, one
    optimizer update per mini-batch: the mini-batch's gradient (minibatch_gradient) -> clip, step -> metrics.

    Every process makes the same number of updates (DDP needs it), even when filtering left it fewer responses than
    the others. engine_lp (with --tis-cap): per response, the engine's sampling log-probs; each token's surrogate
    term is then weighted by min(exp(log pi_old - log pi_engine), cap) (rollout.tis_weights).
    """
    device, N = accelerator.device, len(r_ids)
    n_chunks = max(1, cfg.batch_size // cfg.mini_batch_size)  # mini-batches per epoch, the same on every process
    mu = cfg.epochs * n_chunks
    if accelerator.reduce(torch.tensor([float(N)], device=device), "sum").item() == 0:
        return Update({"policy/updates": 0})  # Skywork: nothing survived rejection sampling anywhere: skip the update
    if engine_lp is not None and any(lp is None or len(lp) != len(r) for lp, r in zip(engine_lp, r_ids)):
        raise RuntimeError("--tis-cap: the rollout engine returned no log-probs for a response")
    old_logp = None  # with mu == 1: logp.detach()
    if mu > 1:
        n_fwd = -(-N // cfg.micro_batch_size)
        with torch.no_grad():
            for _ in range(lockstep(accelerator, n_fwd) - n_fwd):
                dummy_forward(cfg, model, tok, device)
        old_logp = old_logprobs(cfg, model, tok, p_ids, r_ids, device)
    rows = dict(p_ids=p_ids, r_ids=r_ids, adv=adv, truncated=truncated, old_logp=old_logp, engine_lp=engine_lp)
    g = torch.Generator().manual_seed(cfg.seed * 100003 + step)
    log = UpdateLog()
    for epoch in range(cfg.epochs):
        order = torch.randperm(N, generator=g).tolist() if mu > 1 else list(range(N))
        for mb in [c.tolist() for c in torch.tensor(order, dtype=torch.long).tensor_split(n_chunks)]:
            stats = minibatch_gradient(cfg, accelerator, model, ref_model, tok, mb, alpha, log, **rows)
            gn = accelerator.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            for pg in optimizer.param_groups:
                pg["lr"] = cfg.lr * min(1.0, (step * mu + log.updates + 1) / max(1, cfg.warmup_steps))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            log.add(stats, float(gn), first_epoch=epoch == 0)
    return log.result(accelerator, optimizer, alpha)


def minibatch_gradient(cfg, accelerator, model, ref_model, tok, mb, alpha, log, *, p_ids, r_ids, adv, truncated,
                       old_logp, engine_lp) -> list[dict]:
    """The gradient of one mini-batch `mb` (response indices), accumulated over its micro-batches; their statistics.

    Normalisers are global: a mini-batch's sequence and token counts are summed over its micro-batches and over
    processes, and each micro-batch loss is divided by them (times the world size, because DDP averages gradients
    over processes). Gradient accumulation therefore reproduces the one-big-batch gradient exactly.
    """
    device, world = accelerator.device, accelerator.num_processes
    # (a) the tokens that count, and the mini-batch's global normalisers
    n_tok, kept, log.extra = tokens_that_count(cfg, mb, r_ids, truncated, world, log.extra)
    n_seq = float(sum(n > 0 for n in n_tok))  # non-empty responses (grpo.aggregate; verl 1dda039's trainer counts all)
    counts = accelerator.reduce(torch.tensor([n_seq, float(sum(n_tok))], device=device), "sum").cpu() / world
    seqs, toks = max(counts[0].item(), 1e-9), max(counts[1].item(), 1e-9)
    # (b) the loss of each micro-batch, gradients accumulated (DDP all-reduces once, on the last)
    micro = split_micro(mb, p_ids, r_ids, cfg.micro_batch_size, cfg.micro_batch_tokens)
    micro += [[]] * (lockstep(accelerator, len(micro)) - len(micro))  # FSDP: as many forwards everywhere
    stats = []
    for k, mc in enumerate(micro):
        with accelerator.no_sync(model) if k < len(micro) - 1 else contextlib.nullcontext():
            if not mc:  # no responses here this update: a zero loss still joins the gradient all-reduce
                accelerator.backward(dummy_forward(cfg, model, tok, device) if is_sharded(accelerator)
                                     else sum(p.sum() for p in model.parameters()) * 0.0)
                continue
            batch = make_batch(tok, [p_ids[i] for i in mc], [r_ids[i] for i in mc], device)
            mask = batch.mask  # (n, R)
            if cfg.overlong_filter:  # DAPO Sec. 3.4: truncated responses leave the loss (not the group stats)
                mask = dapo.overlong_mask(mask, [truncated[i] for i in mc])
            if kept is not None:  # C3PO: the first kept_i tokens of each selected response
                mask = c3po.budget_mask(mask, kept[[mb.index(i) for i in mc]])
            R = batch.tokens.shape[1]
            old = pad_rows([old_logp[i] for i in mc], R, device) if old_logp is not None else None
            eng = pad_rows([engine_lp[i] for i in mc], R, device) if engine_lp is not None else None
            loss, s = microbatch_loss(cfg, model, ref_model, batch, adv[mc].to(device), old, mask, alpha, seqs, toks,
                                      world, eng)
            accelerator.backward(loss)
        stats.append(s)
    return stats


def tokens_that_count(cfg: Config, mb: list[int], r_ids, truncated, world: int, metrics: dict):
    """Per response of a mini-batch, how many of its tokens enter the loss; C3PO's selection (or None); the metrics.

    C3PO (c3po.budget_select): a greedy selection of exactly Phi tokens (c3po.process_budget: Phi / world per
    process) in rollout order.
    DAPO's overlong filter: truncated responses contribute none (dapo.overlong_mask zeroes them; they stay in the
    group statistics).
    """
    lens = [len(r_ids[i]) for i in mb]
    kept = None
    if cfg.token_budget:
        budget = c3po.process_budget(cfg.token_budget, world)  # Phi / W, refused at set-up unless W divides Phi
        kept = c3po.budget_select(lens, budget) if mb else torch.zeros(0, dtype=torch.long)
        metrics = c3po.budget_metrics(lens, kept, budget) if mb else metrics
    n_tok = lens if kept is None else kept.tolist()
    if cfg.overlong_filter:
        n_tok = [0 if truncated[i] else t for t, i in zip(n_tok, mb)]
    return n_tok, kept, metrics


def microbatch_loss(cfg: Config, model, ref_model, batch, adv, old_logp, mask, alpha, num_seqs, num_tokens, world=1,
                    engine_logp=None):
    """The loss of one micro-batch: the run's idea file's policy_loss (--algorithm), + entropy.py's bonus.

    batch: a trainer.batches.Batch; adv (n,); old_logp (n, R) log pi_old of the sampled tokens, or None on-policy
    (ratio 1, the gradient is REINFORCE's); mask (n, R) the tokens that count; num_seqs / num_tokens the mini-batch's
    global normalisers; world the number of processes (C3PO's budget is Phi / world per process); engine_logp (n, R)
    the engine's sampling log-probs for truncated IS (--tis-cap), or None. Returns the loss to backward and its statistics.
    """
    logp, ent = response_logprobs(model, batch, cfg.temperature, with_entropy=True, chunk_size=cfg.logprob_chunk)  # (n, R)
    old = logp.detach() if old_logp is None else old_logp
    ref = None
    if ref_model is not None:
        with torch.no_grad():
            ref = response_logprobs(ref_model, batch, cfg.temperature, chunk_size=cfg.logprob_chunk)[0]
    tis = tis_weights(old, engine_logp, mask, cfg.tis_cap, cfg.tis_mode) if engine_logp is not None else None
    settings = loss_settings(cfg, world)
    loss, m = algorithm(cfg).policy_loss(logp, old, adv, mask, ref, num_seqs=num_seqs, num_tokens=num_tokens,
                                         token_weights=tis, **settings)
    if alpha:
        agg = {k: settings[k] for k in ("loss_agg", "budget") if k in settings}
        eterm, _ = entropy.entropy_loss(ent, mask, alpha, num_seqs=num_seqs, num_tokens=num_tokens, **agg)
        loss = loss + eterm
    stats = {"loss": loss.item(), **m, "entropy_sum": (ent * mask).sum().item(), "tokens": mask.sum().item(),
             "seqs": (mask.sum(-1) > 0).sum().item(),
             "nll_sum": -(old * batch.mask).sum().item(), "resp_tokens": batch.mask.sum().item()}
    if tis is not None:  # truncated IS: engine (behaviour) vs trainer's pi_old, per token (trainer.metrics.TIS_SUMS)
        over = (tis >= cfg.tis_cap) if cfg.tis_mode == "truncate" else (tis == 0)  # capped, or dropped (mask)
        stats["tis"] = {"weight": (tis * mask).sum().item(), "capped": (over & mask.bool()).sum().item(),
                        "logp_gap": ((old - engine_logp).abs() * mask).sum().item(), "tokens": mask.sum().item(),
                        "weight_sq": (tis * tis * mask).sum().item()}
    return loss, stats


def loss_settings(cfg: Config, world: int = 1) -> dict:
    """The policy loss's settings: the recipe's (its idea file's PAPER, through config.RECIPES) or the flags given.
    With --token-budget, C3PO's constant normaliser Phi / world on each process (c3po.process_budget)."""
    agg = (dict(loss_agg="budget", budget=float(c3po.process_budget(cfg.token_budget, world))) if cfg.token_budget
           else dict(loss_agg=cfg.loss_agg))
    return dict(clip_low=cfg.clip_low, clip_high=cfg.clip_high, kl_coef=cfg.kl_coef, dual_clip_c=cfg.dual_clip, **agg)


# ------------------------------------------------------------------------------------------------
# Step 6: log, evaluate, checkpoint
# ------------------------------------------------------------------------------------------------
def log_step(run: Run, plan: StepPlan, ro: Rollout, upd: Update, t0: float, t_gen: float) -> dict:
    """The step's metrics.jsonl row (summed over processes), kept in run.history."""
    stats = step_stats(run.accelerator, ro)
    row = {"step": plan.step + 1, **stats.metrics, **ro.metrics, **upd.metrics}
    if len(run.stages) > 1:
        row["stage"] = run.stages.index(plan.stage) + 1
    dt = time.time() - t0
    row.update({"perf/tokens_per_s": stats.response_tokens / dt, "perf/step_time_s": dt, "perf/gen_time_s": t_gen})
    run.history.append(row)
    return row


def evaluate_and_save(run: Run, step: int, bar, t_start: float) -> None:
    """Every --eval-every steps a held-out evaluation, the row to metrics.jsonl and the trackers, every --save-every
    steps (and at the end) a checkpoint; the producer (--rollout-lag) is idle for both (its batch is saved)."""
    cfg, acc, row = run.cfg, run.accelerator, run.history[-1]
    done = step + 1 == cfg.max_steps
    due_eval = due(cfg.eval_every, step + 1) and not done
    due_save = done or due(cfg.save_every, step + 1)
    if run.producer and (due_eval or due_save):
        run.producer.wait()
    if due_eval:
        e = run_eval(run, step + 1)
        if e:
            bar.write(f"step {step + 1}: held-out greedy accuracy {e['eval/accuracy']:.3f}")
    if acc.is_main_process:
        with open(os.path.join(cfg.output_dir, "metrics.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
    acc.log({k: v for k, v in row.items() if k != "step"}, step=step + 1)  # trackers (main process; --report-to)
    if due_save:
        checkpoint(run, step + 1, run.wall_before + time.time() - t_start)


def due(every: int, step: int) -> bool:
    """--eval-every / --save-every: due after `step` steps (0 = never on a cadence)."""
    return bool(every and step % every == 0)


def run_eval(run: Run, step: int, sampled: bool = False) -> dict | None:
    """Held-out greedy accuracy, and with `sampled` avg@k / pass@k (k = --eval-samples, at --eval-temperature and
    --eval-top-p: each recipe sets its paper's), on the main process; completions to samples.jsonl; the row joins
    run.evals. The loop samples at the first and the final evaluation only (k x the problems' generations each).
    With several tasks (--stages) each is evaluated at its longest stage's length; its metrics are `eval/<task>/...`,
    and eval/accuracy is their mean."""
    from evaluate import evaluate

    if not run.accelerator.is_main_process and not is_sharded(run.accelerator):
        return None
    cfg = run.cfg
    k = cfg.eval_samples if sampled else 0
    row, shown = {"step": step}, []
    for task in run.tasks:
        with torch.random.fork_rng():  # evaluation never shifts the training sampling stream
            torch.manual_seed(cfg.seed + 7919)  # the same sampled evaluation before and after, whatever came between
            res = evaluate(run.engine, run.tok, task.eval_set, task.reward_fn, samples=k, ks=(1, k) if k else (1,),
                           temperature=cfg.eval_temperature, top_p=cfg.eval_top_p, max_new_tokens=task.max_new_tokens,
                           n_show=8, kind=task.kind, template=cfg.template, system=cfg.system_prompt, stop=cfg.stops,
                           template_kwargs=data.parse_template_kwargs(cfg.chat_template_kwargs))
        prefix = "eval/" if len(run.tasks) == 1 else f"eval/{task.name}/"
        shown += [{"step": step, **({"task": task.name} if len(run.tasks) > 1 else {}), **s} for s in res.pop("samples")]
        row.update({prefix + key: v for key, v in res.items()})
    if len(run.tasks) > 1:
        row["eval/accuracy"] = sum(row[f"eval/{t.name}/accuracy"] for t in run.tasks) / len(run.tasks)
    if not run.accelerator.is_main_process:  # FSDP: every process ran the same evaluation, in lockstep
        return None
    run.accelerator.log({key: v for key, v in row.items() if key != "step" and isinstance(v, (int, float))}, step=step)
    with open(os.path.join(cfg.output_dir, "samples.jsonl"), "a") as f:
        f.writelines(json.dumps(s, default=str) + "\n" for s in shown)
    with open(os.path.join(cfg.output_dir, "evals.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    run.evals.append(row)
    return row


def finish(run: Run, collector: Collector, t_start: float) -> list[dict]:
    """The final evaluation, the workers closed, summary.json and curves.png, the trackers flushed."""
    run.step = None
    run_eval(run, run.cfg.max_steps, sampled=True)
    collector.close()
    for task in run.tasks:
        if hasattr(task.reward_fn, "close"):
            task.reward_fn.close()
    write_summary(run, run.wall_before + time.time() - t_start)
    for tracker in run.accelerator.trackers:  # flush and close (Accelerator.end_training would also tear down the group)
        tracker.finish()
    run.accelerator.wait_for_everyone()
    return run.history


if __name__ == "__main__":
    sys.exit(data.cli(main))
