"""Accelerate and the process group's plumbing: precision, FSDP2, every process in lockstep, the sharded reference,
full weights gathered for the engine's sync."""
from __future__ import annotations

import torch

from trainer.batches import make_batch
from trainer.logprobs import response_logprobs


def precision(cfg) -> str:
    """The precision policy in use: float32, bf16-mixed or bfloat16 (--dtype auto: bf16-mixed on GPU, float32 on CPU)."""
    return ("bf16-mixed" if torch.cuda.is_available() else "float32") if cfg.dtype == "auto" else cfg.dtype


def make_accelerator(cfg):
    """Accelerate with the run's precision, sharding and tracker.

    bf16-mixed: weights, gradients and AdamW states in fp32, the forward under bf16 autocast (Accelerate's
    mixed_precision="bf16"); log-softmax, entropy and the loss in fp32 (logprobs.chunked_token_logprobs upcasts).
    --fsdp: FSDP2 (`fully_shard` per decoder layer, i.e. the model's `_no_split_modules`, then the root), full state
    dicts for checkpoints. Accelerate 1.15 turns FSDP on only for accelerator devices; torch's FSDP2 also runs on CPU
    processes over gloo, so a CPU run (the tests) gets the same Accelerate code path by setting the type itself.
    """
    from accelerate import Accelerator, PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    plugin = None
    if cfg.fsdp:
        plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                                reshard_after_forward=True, state_dict_type="FULL_STATE_DICT",
                                                cpu_ram_efficient_loading=False)
    accelerator = Accelerator(cpu=not torch.cuda.is_available(), fsdp_plugin=plugin,
                              mixed_precision="bf16" if precision(cfg) == "bf16-mixed" else "no",
                              log_with=None if cfg.report_to == "none" else cfg.report_to, project_dir=cfg.output_dir)
    if plugin is not None and accelerator.distributed_type == DistributedType.MULTI_CPU:  # both shared states (borgs)
        PartialState().distributed_type = accelerator.state.distributed_type = DistributedType.FSDP
        accelerator.state.fsdp_plugin = plugin
    if accelerator.distributed_type == DistributedType.FSDP and not accelerator.is_fsdp2:
        raise SystemExit("error: FSDP1 is not supported: set fsdp_version: 2 in the accelerate config (configs/fsdp.yaml)")
    return accelerator


class Lockstep:
    """FSDP: every forward is a collective, so every process runs as many forwards (and backwards) as the busiest: a
    process with fewer responses joins the others' passes with one-token forwards whose loss is zero. Without FSDP
    only the empty micro-batch's zero-loss backward remains (DDP's gradient all-reduce needs every process).

        lockstep = Lockstep(run)
        lockstep.forwards(n)               # before n no-grad forwards here (log pi_old): the others' extra ones
        for micro in lockstep.micro_batches(micro_batches):   # padded with [] to the count every process runs
            if not micro: lockstep.empty_backward(); continue  # a zero loss that still joins the all-reduce
    """

    def __init__(self, run):
        self.cfg, self.accelerator, self.model, self.tok = run.cfg, run.accelerator, run.model, run.tok

    def forwards(self, n: int) -> None:
        with torch.no_grad():
            for _ in range(lockstep(self.accelerator, n) - n):
                dummy_forward(self.cfg, self.model, self.tok, self.accelerator.device)

    def micro_batches(self, micro_batches: list[list[int]]) -> list[list[int]]:
        return micro_batches + [[]] * (lockstep(self.accelerator, len(micro_batches)) - len(micro_batches))

    def empty_backward(self) -> None:
        self.accelerator.backward(dummy_forward(self.cfg, self.model, self.tok, self.accelerator.device)
                                  if is_sharded(self.accelerator) else sum(p.sum() for p in self.model.parameters()) * 0.0)


def lockstep(accelerator, n: int) -> int:
    """FSDP: every forward is a collective, so all processes run the largest count of them (n elsewhere)."""
    if not is_sharded(accelerator):
        return n
    return int(accelerator.reduce(torch.tensor([float(n)], device=accelerator.device), "max").item())


def dummy_forward(cfg, model, tok, device):
    """FSDP: a zero loss from a one-token forward, so a process with nothing left joins the others' passes."""
    pad = tok.pad_token_id
    return response_logprobs(model, make_batch(tok, [[pad]], [[pad]], device), cfg.temperature,
                             chunk_size=cfg.logprob_chunk)[0].sum() * 0.0


def shard_reference(model):
    """FSDP2: the frozen reference sharded like the policy (`fully_shard` per decoder layer, then the root, as
    Accelerate's transformer_based_wrap does), instead of a full copy in every process. Accelerate's prepare() wants an
    optimizer with every FSDP2 model, and the reference has none: torch's fully_shard directly."""
    from torch.distributed.fsdp import fully_shard

    for m in model.modules():
        if type(m).__name__ in (model._no_split_modules or ()):
            fully_shard(m)
    return fully_shard(model)


class GatheredWeights:
    """FSDP2: the model's parameters as full tensors (DTensor.full_tensor, a collective: every process iterates), with
    the HF checkpoint names, for the engine's weight sync (engines.vllm_engine.VLLMEngine.sync_weights)."""

    def __init__(self, model):
        self.model = model

    def named_parameters(self):
        for name, p in self.model.named_parameters():
            yield name, (p.full_tensor() if hasattr(p, "full_tensor") else p)


def is_sharded(accelerator) -> bool:
    """Are the weights sharded across processes (FSDP), so that full weights need a collective?"""
    from accelerate.utils import DistributedType

    return accelerator.distributed_type == DistributedType.FSDP
