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
sampling and the seamless scheduler over N processes (trainer/collect.py); --rollout-lag's producer and the behaviour
weight of the decoupled loss (async_rollout.py, trainer/producer.py); token rows and micro-batches (trainer/batches.py);
the chunked log-probs (trainer/logprobs.py); DDP / FSDP lockstep and sharding (trainer/distributed.py); metric sums,
summary and curves (trainer/metrics.py); set-up, checkpoints and the run directory (trainer/setup.py,
trainer/checkpoints.py, runs.py); LoRA (trainer/lora.py).

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

import async_rollout
import c3po
import cispo
import curriculum
import dapo
import entropy
import grpo
import gspo
import runs
from config import Config, parse_config
from tasks.templates import parse_template_kwargs
from tools.cli import cli
from trainer import lora
from trainer.batches import MicroBatch, make_batch, old_logprobs, pad_rows, split_micro
from trainer.checkpoints import checkpoint
from trainer.collect import Collector, observe
from trainer.distributed import GatheredWeights, Lockstep, is_sharded
from trainer.logprobs import response_logprobs
from trainer.metrics import UpdateLog, step_stats, write_summary
from trainer.producer import take_lagged
from trainer.records import Advantages, Rollout, StepPlan, Update, UpdateBatch
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
    cfg, accelerator, collector, t_start = run.cfg, run.accelerator, Collector(run), time.time()
    if not run.evals:
        if accelerator.is_main_process:
            print(f"evaluating the initial policy on {' + '.join(str(len(t.eval_set)) for t in run.tasks)} held-out problems ...",
                  flush=True)
        run_eval(run, 0, sampled=True)
    elif due(cfg.eval_every, run.start_step) and run.evals[-1]["step"] < run.start_step < cfg.max_steps:
        run_eval(run, run.start_step)  # a finished run extended (a larger --max-steps): the evaluation its last step
        # would have had if the run had been this long (its final one, with avg@k, is not the uninterrupted run's);
        # at start_step == max_steps the run was stopped in its final evaluation, which finish() makes again
    bar = runs.progress_bar(range(run.start_step, cfg.max_steps), initial=run.start_step, total=cfg.max_steps,
               disable=not accelerator.is_main_process, dynamic_ncols=True)
    for step in bar:
        t0, run.step = time.time(), step

        # 1-3. sample prompts, generate G completions each, score them (dynamic sampling: until the batch is full);
        # --rollout-lag 1: the producer made this batch with the previous weights while the last update ran
        plan = run.plan(step)  # this step's stage, task, G, B and lengths (--stages, curricula)
        rollout = collect(run, collector, plan)
        t_gen = time.time() - t0
        rollout.metrics.update(observe(run, plan, rollout, step))  # every group's pass rate -> MiMo's easy pool / online filter
        if run.producer and step + 1 < cfg.max_steps:  # sync point: theta_step to the producer, for batch step + 1
            rollout.metrics["async/producer_idle_s"] = run.producer.start(step + 1, accelerator.unwrap_model(run.model), version=step)

        # 4. group-relative advantages (Skywork's rejection sampling drops zero-advantage groups)
        adv = advantages(cfg, rollout)

        # 5. mu optimizer updates over mini-batches of the kept responses, then the engine takes the new weights
        batch = kept_responses(run, rollout, adv)
        alpha = entropy_coef(run, batch, rollout.metrics)  # Ring-lite's constant or Skywork-OR1's alpha_k (entropy.py)
        result = update_policy(run, batch, alpha, step)
        sync_engine(run)

        # 6. log, evaluate, checkpoint
        row = log_step(run, plan, rollout, result, t0, t_gen)
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
    except dapo.DynamicSamplingExhausted as exhausted:  # the data is too easy or too hard for the model: one line
        raise SystemExit(f"error: step {plan.step + 1}: {exhausted}") from None


# ------------------------------------------------------------------------------------------------
# Step 4: advantages
# ------------------------------------------------------------------------------------------------
def algorithm(cfg: Config):
    """The idea file the run's advantages and policy loss come from: grpo.py, dapo.py, c3po.py, gspo.py or cispo.py
    (--algorithm)."""
    return {"grpo": grpo, "dapo": dapo, "c3po": c3po, "gspo": gspo, "cispo": cispo}[cfg.algorithm]


def advantages(cfg: Config, rollout: Rollout) -> Advantages:
    """Group-relative advantages (a group lives on one process, so this is exact) and the responses kept."""
    G = rollout.group_size
    values = algorithm(cfg).group_advantages(torch.tensor(rollout.rewards, dtype=torch.float64), G,
                                             scale_by_std=cfg.scale_adv_by_std)  # (N,)
    keep = torch.ones(len(rollout.completions), dtype=torch.bool)
    if cfg.rejection_sampling:  # Skywork-OR1 Sec. 3.1: zero-advantage groups leave, nothing replaces them (on the
        # rewards, so partial-credit groups with different scores stay whatever --filter-metric says)
        keep = curriculum.reject_zero_advantage(values, G).repeat_interleave(G)
        rollout.metrics["rollout/groups_kept_frac"] = keep.float().mean().item()
    return Advantages(values, keep)


# ------------------------------------------------------------------------------------------------
# Step 5: the policy update
# ------------------------------------------------------------------------------------------------
def kept_responses(run: Run, rollout: Rollout, adv: Advantages) -> UpdateBatch:
    """What the update needs of each kept response: prompt and response ids, advantage, truncation, and with
    --tis-cap the log-probs it was sampled with (the engine's, vLLM; with --rollout-lag log pi_behav, the producer's)."""
    G, kept = rollout.group_size, adv.keep.nonzero().flatten().tolist()  # kept: response indices
    behav = None
    if run.cfg.tis_cap:
        behav = [(rollout.behav_logp or [c.logprobs for c in rollout.completions])[i] for i in kept]
    return UpdateBatch(prompt_ids=[run.tok(rollout.prompts[i // G], add_special_tokens=False)["input_ids"] for i in kept],
                       response_ids=[rollout.completions[i].token_ids for i in kept], advantages=adv.values[kept],
                       truncated=[rollout.completions[i].truncated for i in kept], behav_logp=behav)


def entropy_coef(run: Run, batch: UpdateBatch, metrics: dict) -> float:
    """This step's entropy coefficient: Ring-lite's constant (--entropy-coef), or Skywork-OR1's alpha_k from its
    controller (entropy.AdaptiveEntropy, which keeps the estimate and its timing; --entropy-timing paper reads this
    rollout's log pi_old: one extra forward pass over the kept responses). The controller's sums are over every
    process; its metrics join the step's."""
    ctrl, accelerator = run.ent_ctrl, run.accelerator
    if ctrl is None:
        return run.cfg.entropy_coef
    alpha, ctrl_metrics = ctrl.coef(
        lambda: old_logprobs(run.cfg, run.model, run.tok, batch.prompt_ids, batch.response_ids, accelerator.device)
        if len(batch) else [],
        lambda sums: accelerator.reduce(torch.tensor(sums, dtype=torch.float64).to(accelerator.device), "sum").tolist())
    metrics.update(ctrl_metrics)
    return alpha


def update_policy(run: Run, batch: UpdateBatch, alpha: float, step: int) -> Update:
    """Step 5: mu = epochs x mini-batches optimizer updates over the kept responses, each on the gradient of one
    mini-batch accumulated over its micro-batches: the masks -> the idea file's policy_loss (--algorithm) -> the entropy
    bonus (alpha) -> backward; then clip -> step.

    Normalisers are global (`normalisers`): each micro-batch's loss is divided by its mini-batch's counts summed over
    processes, so accumulating micro-batches (and DDP's average over processes) gives the one-big-batch gradient exactly.
    Every process runs the same updates, micro-batches and (FSDP) forwards: trainer.distributed.Lockstep. run: the
    trainer.setup.Run (or anything with its cfg, accelerator, model, ref_model, optimizer, tok and ent_ctrl).
    """
    cfg, accelerator, algo, lockstep = run.cfg, run.accelerator, algorithm(run.cfg), Lockstep(run)
    if not start_update(run, batch, lockstep):  # no process has a response (Skywork's rejection sampling): no update
        return Update({"policy/updates": 0})
    settings, log = loss_settings(cfg, accelerator.num_processes), UpdateLog()
    agg = {k: v for k, v in settings.items() if k in ("loss_agg", "budget")}  # the entropy term's: the policy loss's
    for epoch, minibatch in minibatches(cfg, len(batch), step):
        budget_tokens, budget_metrics = token_budget(cfg, batch, minibatch, accelerator.num_processes)  # C3PO, or None
        norms = normalisers(run, batch, minibatch, budget_tokens)  # num_seqs, num_tokens of the mini-batch
        micro_batches = lockstep.micro_batches(split_micro(minibatch, batch.prompt_ids, batch.response_ids,
                                                           cfg.micro_batch_size, cfg.micro_batch_tokens))
        stats = []
        for k, micro in enumerate(micro_batches):  # gradients accumulate; DDP all-reduces once, on the last
            with accelerator.no_sync(run.model) if k < len(micro_batches) - 1 else contextlib.nullcontext():
                if not micro:  # no responses here this update: a zero loss still joins the gradient all-reduce
                    lockstep.empty_backward()
                    continue
                rows = make_batch(run.tok, [batch.prompt_ids[i] for i in micro], [batch.response_ids[i] for i in micro],
                                  accelerator.device)
                mask = rows.mask  # (n, R)
                if cfg.overlong_filter:  # DAPO Sec. 3.4: truncated responses leave the loss (not the group stats)
                    mask = dapo.overlong_mask(mask, [batch.truncated[i] for i in micro])
                if budget_tokens is not None:  # C3PO: the first budget_tokens[i] tokens of each selected response
                    mask = c3po.budget_mask(mask, budget_tokens[micro])
                mb = micro_batch(batch, micro, rows, mask)
                logp, ent = response_logprobs(run.model, rows, cfg.temperature, with_entropy=True,
                                              chunk_size=cfg.logprob_chunk)  # (n, R) each
                old, ref, tis, tis_stats = loss_inputs(run, mb, logp)  # log pi_old, log pi_ref, truncated-IS weights
                if epoch == 0 and run.ent_ctrl is not None:  # Skywork, code timing: the next step's estimate
                    run.ent_ctrl.observe(old, rows.mask)
                loss, m = algo.policy_loss(logp, old, mb.advantages, mask, ref, token_weights=tis, **norms, **settings)
                if alpha:  # Ring-lite's / Skywork-OR1's entropy bonus, aggregated as the policy loss is
                    loss = loss + entropy.entropy_loss(ent, mask, alpha, algo.aggregate, **norms, **agg)
                accelerator.backward(loss)
            stats.append({"loss": loss.item(), **m, **token_sums(ent, mask), **tis_stats})
        grad_norm = accelerator.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
        warm_up(run, step * n_updates(cfg) + log.updates)
        run.optimizer.step()
        run.optimizer.zero_grad(set_to_none=True)
        log.add(stats, float(grad_norm), budget_metrics)
    return log.result(accelerator, run.optimizer, alpha)


def n_updates(cfg: Config) -> int:
    """mu: optimizer updates per rollout batch, epochs x batch_size / mini_batch_size (the same on every process)."""
    return cfg.epochs * max(1, cfg.batch_size // cfg.mini_batch_size)


def start_update(run: Run, batch: UpdateBatch, lockstep: Lockstep) -> bool:
    """Before the first update: colocated vLLM sleeps (training takes its KV-cache memory; sync_weights wakes it);
    False when no process has a response to train on; with mu > 1, log pi_old of every response, once (with mu = 1 it
    is logp.detach(): the ratio is 1)."""
    cfg, accelerator = run.cfg, run.accelerator
    if cfg.vllm_sleep and hasattr(run.engine, "sleep"):
        run.engine.sleep()
    if accelerator.reduce(torch.tensor([float(len(batch))], device=accelerator.device), "sum").item() == 0:
        return False
    if batch.behav_logp is not None and any(lp is None or len(lp) != len(r)
                                            for lp, r in zip(batch.behav_logp, batch.response_ids)):
        raise RuntimeError("--tis-cap: the rollout engine returned no log-probs for a response")
    if n_updates(cfg) > 1:
        lockstep.forwards(-(-len(batch) // cfg.micro_batch_size))
        batch.old_logp = old_logprobs(cfg, run.model, run.tok, batch.prompt_ids, batch.response_ids, accelerator.device)
    return True


def minibatches(cfg: Config, n: int, step: int):
    """(epoch, response indices) of each optimizer update: --epochs passes over the n responses, each cut into
    batch_size / mini_batch_size mini-batches, in an order shuffled per step when mu > 1 (rollout order otherwise)."""
    shuffle = torch.Generator().manual_seed(cfg.seed * 100003 + step)
    for epoch in range(cfg.epochs):
        order = torch.randperm(n, generator=shuffle).tolist() if n_updates(cfg) > 1 else list(range(n))
        for chunk in torch.tensor(order, dtype=torch.long).tensor_split(max(1, cfg.batch_size // cfg.mini_batch_size)):
            yield epoch, chunk.tolist()


def token_budget(cfg: Config, batch: UpdateBatch, minibatch: list[int], world: int):
    """C3PO (c3po.budget_select): per response of the batch, how many of its first tokens a mini-batch's budget
    selects (Phi / world on each process, c3po.process_budget; greedily in rollout order; 0 outside the mini-batch),
    and c3po.budget_metrics; (None, None) without --token-budget."""
    if not cfg.token_budget:
        return None, None
    budget_tokens = torch.zeros(len(batch), dtype=torch.long)
    if not minibatch:
        return budget_tokens, None
    budget, lens = c3po.process_budget(cfg.token_budget, world), [len(batch.response_ids[i]) for i in minibatch]
    selected = c3po.budget_select(lens, budget)  # (len(minibatch),) in rollout order
    budget_tokens[minibatch] = selected
    return budget_tokens, c3po.budget_metrics(lens, selected, budget)


def normalisers(run: Run, batch: UpdateBatch, minibatch: list[int], budget_tokens) -> dict:
    """The policy loss's num_seqs and num_tokens for a mini-batch: its responses with a token in the loss and those
    tokens (C3PO's selection; none of a truncated response under DAPO's overlong filter), summed over processes and
    divided by the world size (DDP averages the processes' gradients). Non-empty responses only: grpo.aggregate."""
    cfg, accelerator = run.cfg, run.accelerator
    n_tok = [len(batch.response_ids[i]) if budget_tokens is None else int(budget_tokens[i]) for i in minibatch]
    if cfg.overlong_filter:
        n_tok = [0 if batch.truncated[i] else n for n, i in zip(n_tok, minibatch)]
    counts = accelerator.reduce(torch.tensor([float(sum(n > 0 for n in n_tok)), float(sum(n_tok))],
                                             device=accelerator.device), "sum").cpu() / accelerator.num_processes
    return {"num_seqs": max(counts[0].item(), 1e-9), "num_tokens": max(counts[1].item(), 1e-9)}


def micro_batch(batch: UpdateBatch, micro: list[int], rows, mask) -> MicroBatch:
    """A micro-batch's token rows and loss mask with its responses' advantages, log pi_old and log pi_behav padded."""
    R, device = rows.tokens.shape[1], rows.tokens.device
    return MicroBatch(rows, batch.advantages[micro].to(device), mask,
                      pad_rows([batch.old_logp[i] for i in micro], R, device) if batch.old_logp is not None else None,
                      pad_rows([batch.behav_logp[i] for i in micro], R, device) if batch.behav_logp is not None else None)


def loss_inputs(run: Run, micro: MicroBatch, logp: torch.Tensor):
    """What the idea file's policy_loss takes beside logp (n, R): log pi_old (logp.detach() on-policy: the ratio is 1,
    the gradient REINFORCE's), log pi_ref (--kl-coef; else None), and with --tis-cap the truncated-IS weights of
    engine vs trainer (async_rollout.tis_weights) and their statistics {"tis": ...} (trainer.metrics.TIS_SUMS)."""
    cfg = run.cfg
    old = logp.detach() if micro.old_logp is None else micro.old_logp
    ref = None
    if run.ref_model is not None:
        with torch.no_grad():
            ref = response_logprobs(run.ref_model, micro.rows, cfg.temperature, chunk_size=cfg.logprob_chunk)[0]
    if micro.behav_logp is None:
        return old, ref, None, {}
    tis = async_rollout.tis_weights(old, micro.behav_logp, micro.mask, cfg.tis_cap, cfg.tis_mode)
    return old, ref, tis, {"tis": async_rollout.tis_stats(tis, old, micro.behav_logp, micro.mask, cfg.tis_cap, cfg.tis_mode)}


def token_sums(ent: torch.Tensor, mask: torch.Tensor) -> dict:
    """A micro-batch's entropy sum, tokens and non-empty responses in the loss (trainer.metrics.UpdateLog's weights)."""
    return {"entropy_sum": (ent * mask).sum().item(), "tokens": mask.sum().item(), "seqs": (mask.sum(-1) > 0).sum().item()}


def warm_up(run: Run, update: int) -> None:
    """Linear learning-rate warm-up over the first --warmup-steps optimizer updates (`update`: 0-based, over the run)."""
    for group in run.optimizer.param_groups:
        group["lr"] = run.cfg.lr * min(1.0, (update + 1) / max(1, run.cfg.warmup_steps))


def loss_settings(cfg: Config, world: int = 1) -> dict:
    """The policy loss's settings: the recipe's (its idea file's PAPER, through config.RECIPES) or the flags given.
    With --token-budget, C3PO's constant normaliser Phi / world on each process (c3po.process_budget)."""
    agg = (dict(loss_agg="budget", budget=float(c3po.process_budget(cfg.token_budget, world))) if cfg.token_budget
           else dict(loss_agg=cfg.loss_agg))
    return dict(clip_low=cfg.clip_low, clip_high=cfg.clip_high, kl_coef=cfg.kl_coef, dual_clip_c=cfg.dual_clip, **agg)


def sync_engine(run: Run) -> None:
    """The rollout engine takes the updated weights (FSDP with vLLM: gathered to full tensors; LoRA: the engine's view)."""
    cfg, accelerator = run.cfg, run.accelerator
    weights = (GatheredWeights(run.model) if is_sharded(accelerator) and cfg.rollout == "vllm"
               else accelerator.unwrap_model(run.model))
    run.engine.sync_weights(lora.engine_view(weights, cfg) if cfg.lora_rank else weights)


# ------------------------------------------------------------------------------------------------
# Step 6: log, evaluate, checkpoint
# ------------------------------------------------------------------------------------------------
def log_step(run: Run, plan: StepPlan, rollout: Rollout, result: Update, t0: float, t_gen: float) -> dict:
    """The step's metrics.jsonl row (summed over processes), kept in run.history."""
    stats = step_stats(run.accelerator, rollout, plan.task.reward_fn)
    row = {"step": plan.step + 1, **stats.metrics, **rollout.metrics, **result.metrics}
    if len(run.stages) > 1:
        row["stage"] = run.stages.index(plan.stage) + 1
    dt = time.time() - t0
    row.update({"perf/tokens_per_s": stats.response_tokens / dt, "perf/step_time_s": dt, "perf/gen_time_s": t_gen})
    run.history.append(row)
    return row


def evaluate_and_save(run: Run, step: int, bar, t_start: float) -> None:
    """Every --eval-every steps a held-out evaluation, the row to metrics.jsonl and the trackers, every --save-every
    steps (and at the end) a checkpoint; the producer (--rollout-lag) is idle for both (its batch is saved)."""
    cfg, accelerator, row = run.cfg, run.accelerator, run.history[-1]
    done = step + 1 == cfg.max_steps
    due_eval = due(cfg.eval_every, step + 1) and not done
    due_save = done or due(cfg.save_every, step + 1)
    if run.producer and (due_eval or due_save):
        run.producer.wait()
    if due_eval:
        evaluation = run_eval(run, step + 1)
        if evaluation:
            bar.write(f"step {step + 1}: held-out greedy accuracy {evaluation['eval/accuracy']:.3f}")
    if accelerator.is_main_process:
        with open(os.path.join(cfg.output_dir, "metrics.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
    accelerator.log({k: v for k, v in row.items() if k != "step"}, step=step + 1)  # trackers (main process; --report-to)
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
                           template_kwargs=parse_template_kwargs(cfg.chat_template_kwargs))
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
    run.step = run.cfg.max_steps  # Ctrl-C from here on: "during the final evaluation" (a resume makes it again)
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
    sys.exit(cli(main))
