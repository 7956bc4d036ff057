"""Checkpoint glue: what a checkpoint-N holds besides the weights (runs.save_checkpoint writes it atomically), how a
resumed run gets it back, and the run directory's files."""
from __future__ import annotations

import dataclasses
import json
import os

import torch

import runs
from runs import save_checkpoint, set_rng_states
from trainer.producer import pending_from, pending_state


FORMAT = 2  # trainer_state.pt's layout; 1 kept Skywork's entropy estimate outside its controller (a top-level last_nll)


def checkpoint(run, step: int, wall_time_s: float) -> None:
    """OUTPUT_DIR/checkpoint-STEP (runs.save_checkpoint: atomic), then only the newest --keep-checkpoints kept."""
    cfg = run.cfg
    save_checkpoint(os.path.join(cfg.output_dir, f"checkpoint-{step}"), run.accelerator, run.model, run.tok, run.optimizer,
                    {"format": FORMAT, "step": step, "samplers": [t.sampler.state_dict() for t in run.tasks], "history": run.history,
                     "evals": run.evals, "entropy": run.ent_ctrl.state_dict() if run.ent_ctrl else None,
                     "wall_time_s": wall_time_s, "config": dataclasses.asdict(cfg),
                     "pending": pending_state(run.producer.pending) if run.producer else None})  # --rollout-lag
    if run.accelerator.is_main_process:
        runs.prune_checkpoints(cfg.output_dir, cfg.keep_checkpoints)


def restore(run, ckpt: str, sharded: bool) -> None:
    """The optimizer, every process's RNG streams, the prompt samplers, the entropy controller and the history of the
    checkpoint `ckpt` (its weights were loaded with the model)."""
    state = torch.load(os.path.join(ckpt, "trainer_state.pt"), weights_only=False)
    version = state.get("format", 1 if "last_nll" in state else FORMAT)
    if version != FORMAT:
        raise SystemExit(f"error: --resume {ckpt}: its trainer_state.pt is format {version}; this train.py resumes "
                         f"format {FORMAT} (the train.py that wrote it resumes it)")
    if sharded:  # every process loads the full state and keeps its shards
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(run.model, run.optimizer, optim_state_dict=state["optimizer"],
                                 options=StateDictOptions(full_state_dict=True))
    else:
        run.optimizer.load_state_dict(state["optimizer"])
    set_rng_states(run.accelerator, state["rng"])
    for task, sampler_state in zip(run.tasks, state["samplers"]):
        task.sampler.load_state_dict(sampler_state)
    if run.ent_ctrl is not None:
        run.ent_ctrl.load_state_dict(state["entropy"])
    run.start_step, run.history, run.evals, run.wall_before = state["step"], state["history"], state["evals"], state["wall_time_s"]
    if run.producer is not None and state.get("pending") is not None:
        run.producer.put_back(pending_from(state["pending"]))  # generated before the checkpoint, by the previous weights


def start_run_dir(run, model_path: str) -> None:
    """The run directory (main process): --overwrite clears the previous run's files; config.json (the model's
    resolved path in "model"), and metrics / evals / samples rewritten from the checkpoint's history on resume."""
    cfg = run.cfg
    if cfg.overwrite and not cfg.resume:
        runs.clear_run(cfg.output_dir)
    os.makedirs(cfg.output_dir, exist_ok=True)
    runs.write_run_config(os.path.join(cfg.output_dir, "config.json"), {**dataclasses.asdict(cfg), "model": model_path,
                                                                          "machine": runs.machine()})
    with open(os.path.join(cfg.output_dir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in run.history)
    with open(os.path.join(cfg.output_dir, "evals.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in run.evals)
    samples = os.path.join(cfg.output_dir, "samples.jsonl")
    if cfg.resume and os.path.exists(samples):  # the evaluations' completions, as far as the checkpoint's evaluations go
        steps = {r["step"] for r in run.evals}
        with open(samples) as f:
            kept = [line for line in f if json.loads(line)["step"] in steps]
        with open(samples, "w") as f:
            f.writelines(kept)
