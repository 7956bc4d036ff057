"""LoRA through peft: a frozen base, trainable low-rank adapters, the reference model for free.

    python train.py --lora-rank 8                       # LoRA on every linear layer of the decoder
    python -m trainer.lora --merge runs/default/checkpoint-40 --out runs/merged/   # a plain model directory (base + adapter)

Notable features
  * `wrap`: peft's `get_peft_model` with `LoraConfig(r, alpha, dropout, target_modules)`; default targets "all-linear"
    (peft: every nn.Linear of the decoder, the LM head excluded), as verl's LoRA guide and TRL's "LoRA without
    regret" use (docs/peers.md). The base keeps the dtype it was
    loaded in (train.py loads it in bf16 under bf16-mixed: no fp32 master copy of frozen weights); peft keeps the
    adapters in fp32 (`autocast_adapter_dtype`), so only they and their AdamW states cost fp32.
    The adapters' initialisation (A: Kaiming-uniform, B: 0, peft's default) draws from its own seeded stream, so
    turning LoRA on does not shift the sampling streams, and every process starts from the same adapter.
  * `Reference`: the reference policy (the KL term's pi_ref) is the same model with the adapter disabled (peft's
    `disable_adapter()`): the initial policy exactly, since the base is frozen; no second copy of the weights.
    verl and TRL do the same (verl: the reference forward under `engine.disable_adapter()`; TRL: under
    `use_adapter(model, adapter_name=None)`, all adapters disabled, unless it trains a loaded adapter and beta > 0,
    which gets a "ref" copy of that adapter).
  * `MergedWeights`: what a weight-synced engine (vLLM) loads: W + (alpha / r) B A computed out of place in fp32 and
    cast to the base's dtype, under the base model's parameter names. The training weights are never merged and
    unmerged in place (in bf16, W + dW - dW != W: repeated in-place merges drift, a bug peers have hit); each sync
    recomputes from the untouched base, so 100 syncs equal one (tests/test_lora.py).
    The project's own engines ('fast', 'hf') generate from the adapted model directly: merging would need a second
    copy of the weights for one step's rollouts (docs/lora.md: the measured decode cost of the adapters).
  * Checkpoints: `PeftModel.save_pretrained` writes the adapter as peft does (adapter_config.json +
    adapter_model.safetensors, loadable by peft and by vLLM's LoRA loader); train.py adds the tokenizer and its
    trainer_state.pt (optimizer over the adapter parameters, RNG). `load_for_inference` gives evaluate.py / tools/grade.py a
    plain merged model from such a directory; `python -m trainer.lora --merge` writes one.
  * `--load-in-4bit` (QLoRA): the base NF4-quantised by bitsandbytes at load time (bitsandbytes 0.50.2 also runs it
    on CPU, measured here, at reduced speed). 4-bit weights cannot be merged exactly, so QLoRA rolls out with the
    project's engines ('fast', 'hf') from the adapted model; an adapter-only sync to vLLM is not implemented.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os

import torch

# peft imports bitsandbytes when it is installed; on CPU it warns at import that an optional kernels package is
# missing (it falls back to its own CPU code, measured working here): not the user's problem
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_NAME = "default"  # peft's name of the one adapter
# LoRA's lr default = LR_SCALE x full fine-tuning's: TRL's "LoRA without regret" (Schulman et al. 2025) finds LoRA's
# best lr ~10x full fine-tuning's, in RL as in SFT, at alpha 32 with 1/r scaling (independent of the rank); its GRPO
# example uses 1e-5 with LoRA, 1e-6 without; verl's LoRA guide says to raise the lr by an order of magnitude
# (docs/peers.md).
LR_SCALE = 10.0
# An lr below this with LoRA is full-fine-tuning-sized (the papers' 1e-6 to 3e-6 for 7B-32B): train.py warns.
FULL_FT_LR = 1e-5


def is_adapter_dir(path: str) -> bool:
    """A directory written by PeftModel.save_pretrained (a LoRA checkpoint of train.py)."""
    return bool(path) and os.path.isfile(os.path.join(os.path.expanduser(path), ADAPTER_CONFIG))


def base_path(adapter_dir: str) -> str:
    """The base model an adapter was trained on (peft records it in adapter_config.json)."""
    with open(os.path.join(adapter_dir, ADAPTER_CONFIG)) as f:
        return json.load(f)["base_model_name_or_path"]


def targets(spec: str):
    """--lora-targets: 'all-linear' (peft's: every linear layer but the LM head) or comma-separated module names."""
    return "all-linear" if spec in ("", "all-linear") else [t.strip() for t in spec.split(",") if t.strip()]


def validate(cfg, bad):
    """Config.validate's LoRA checks (bad(flag, msg) stops with one error line); a warning for a full-FT-sized lr."""
    import sys

    if cfg.lora_rank < 0:
        bad("lora-rank", f"must be >= 0 (0 = full fine-tuning), got {cfg.lora_rank}")
    if cfg.lora_alpha <= 0:
        bad("lora-alpha", f"must be > 0, got {cfg.lora_alpha}")
    if not 0 <= cfg.lora_dropout < 1:
        bad("lora-dropout", f"must be in [0, 1), got {cfg.lora_dropout}")
    if cfg.lora_vllm_sync not in ("merged", "adapter"):
        bad("lora-vllm-sync", f"{cfg.lora_vllm_sync!r} is not 'merged' or 'adapter'")
    if cfg.load_in_4bit and cfg.rollout == "vllm" and cfg.lora_vllm_sync != "adapter":
        bad("load-in-4bit", "4-bit weights cannot be merged exactly for vLLM: add --lora-vllm-sync adapter (vLLM "
                            "serves the adapter on the full-precision base) or use --rollout fast or hf")
    if cfg.lr < FULL_FT_LR:
        print(f"warning: --lr {cfg.lr:g} with --lora-rank is a full-fine-tuning-sized learning rate; LoRA's best is about "
              f"{LR_SCALE:g}x full fine-tuning's (TRL 'LoRA without regret'; verl's LoRA guide: an order of magnitude)",
              file=sys.stderr)


def load_base(cfg, model_path: str, dtype):
    """(model, tokenizer) of the frozen base: --model (also when resuming: the checkpoint holds the adapter only).
    --load-in-4bit: QLoRA's base, NF4-quantised by bitsandbytes at load time (compute in `dtype`)."""
    from engines.loading import load_model

    if not cfg.load_in_4bit:
        return load_model(model_path, dtype, attn_implementation=cfg.attn_implementation)
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise SystemExit("error: --load-in-4bit: bitsandbytes is not installed (pip install -e '.[qlora]')")
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    _, tok = load_model(model_path, dtype)  # checks the directory, one error line if it is not a model
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)
    model = AutoModelForCausalLM.from_pretrained(model_path, quantization_config=q, dtype=dtype)
    for m in model.modules():  # bitsandbytes 0.50 on CPU repacks a 4-bit weight for inference at the first eval-mode
        if hasattr(m, "support_avx512bf16_for_cpu"):  # forward, after which a training forward fails (in-place bias
            m.support_avx512bf16_for_cpu = False  # add on a grad-requiring result): rollouts and training alternate here
    return model, tok


def load(cfg, model_path: str, dtype, resume_from: str | None = None):
    """(peft model, tokenizer): the frozen base from --model with fresh adapters, or the checkpoint's when resuming."""
    model, tok = load_base(cfg, model_path, dtype)
    return wrap(model, cfg, resume_from, model_path), tok


def wrap(model, cfg, resume_from: str | None = None, model_path: str = ""):
    """The model with trainable LoRA adapters (fresh, or the checkpoint's when resuming); the base frozen."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if model_path:
        model.name_or_path = model_path  # recorded as base_model_name_or_path in the adapter's config
    if cfg.gradient_checkpointing:  # reentrant checkpointing needs an input that requires grad (frozen embedding)
        model.enable_input_require_grads()
    with torch.random.fork_rng(devices=[]):  # the adapter init draws from its own stream
        torch.manual_seed(cfg.seed)
        if resume_from:
            return PeftModel.from_pretrained(model, resume_from, is_trainable=True)
        lc = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                        target_modules=targets(cfg.lora_targets), task_type="CAUSAL_LM")
        try:
            peft_model = get_peft_model(model, lc)
        except ValueError as e:  # e.g. a --lora-targets name that matches no module
            raise SystemExit(f"error: --lora-targets {cfg.lora_targets!r}: {str(e).splitlines()[0]}")
        trainable, total = peft_model.get_nb_trainable_parameters()
        if os.environ.get("RANK", "0") == "0":  # the run says it is a LoRA run (main process)
            print(f"LoRA: rank {cfg.lora_rank}, alpha {cfg.lora_alpha}, on {cfg.lora_targets or 'every linear layer'}: "
                  f"{trainable:,} trainable parameters of {total:,} (adapters included: {100 * trainable / total:.1f}%); the base is frozen",
                  flush=True)
        return peft_model


class Reference(torch.nn.Module):
    """pi_ref = the peft model with its adapter disabled (the frozen base), called like a model.

    `module` is the (unwrapped) peft model: trainer.logprobs.response_logprobs swaps the LM head on it for the chunked log-prob
    head, as for the policy. Use under torch.no_grad()."""

    def __init__(self, peft_model):
        super().__init__()
        self.module = peft_model

    def forward(self, **kw):
        with self.module.disable_adapter():
            return self.module(**kw)


def lora_layers(peft_model):
    """(base-model module name, LoRA layer) for each adapted linear layer."""
    from peft.tuners.lora import LoraLayer

    prefix = "base_model.model."
    for name, m in peft_model.named_modules():
        if isinstance(m, LoraLayer) and ADAPTER_NAME in m.lora_A:
            yield name[len(prefix):] if name.startswith(prefix) else name, m


@torch.no_grad()
def merged_state(peft_model):
    """(base-model name, tensor) of every parameter with the adapters folded in: W + scaling * B @ A in fp32, out of
    place, cast to W's dtype. Parameters outside the adapted layers come as they are (the same tensors)."""
    deltas = {}
    for name, m in lora_layers(peft_model):
        a, b = m.lora_A[ADAPTER_NAME].weight.float(), m.lora_B[ADAPTER_NAME].weight.float()
        deltas[name + ".weight"] = (b @ a) * m.scaling[ADAPTER_NAME]
    base = peft_model.get_base_model()
    for name, p in base.named_parameters():
        if ".lora_" in name:
            continue
        name = name.replace(".base_layer.", ".")
        d = deltas.get(name)
        yield name, p.detach() if d is None else (p.detach().float() + d).to(p.dtype)


class MergedWeights:
    """The engine's view of a LoRA policy: `named_parameters()` yields the merged weights (merged_state) under the
    base model's names, what engines.vllm_engine.VLLMEngine.sync_weights loads; `parameters()` the base's (for its
    dtype)."""

    def __init__(self, peft_model):
        self.model = getattr(peft_model, "module", peft_model)

    def named_parameters(self):
        return merged_state(self.model)

    def parameters(self):
        return self.model.get_base_model().parameters()

    @property
    def config(self):  # what an engine's bf16 copy is built from (--rollout-dtype bfloat16)
        return self.model.get_base_model().config

    @property
    def generation_config(self):
        return self.model.get_base_model().generation_config


class AdapterWeights:
    """The engine's view of a LoRA policy for the adapter-only sync (--lora-vllm-sync adapter): `save_adapter(dir)`
    writes the adapter as peft saves it (adapter_config.json + adapter_model.safetensors), which vLLM loads as a
    LoRARequest next to the base weights it started with; `parameters()` the base's (for its dtype)."""

    def __init__(self, peft_model):
        self.model = getattr(peft_model, "module", peft_model)

    def save_adapter(self, path: str) -> None:
        self.model.save_pretrained(path)

    def parameters(self):
        return self.model.get_base_model().parameters()


def engine_view(model, cfg):
    """What train.py hands the engine for a LoRA policy: for vLLM the merged weights (the default) or the adapter
    alone (--lora-vllm-sync adapter); for the project's own engines the adapted model itself, or the merged weights
    for their bf16 copy (--rollout-dtype bfloat16)."""
    if cfg.rollout != "vllm":
        return MergedWeights(model) if cfg.rollout_dtype == "bfloat16" else model
    return AdapterWeights(model) if cfg.lora_vllm_sync == "adapter" else MergedWeights(model)


def merged_model(peft_model):
    """A plain transformers model (a copy) with the adapters merged out of place in fp32."""
    import copy

    base = peft_model.get_base_model()
    with _without_lora(peft_model):
        plain = copy.deepcopy(base)
    state = dict(merged_state(peft_model))
    plain.load_state_dict(state, strict=False)
    return plain


@contextlib.contextmanager
def _without_lora(peft_model):
    """Temporarily put each adapted layer's base linear back in its place (for a copy of the plain model)."""
    swapped = []
    base = peft_model.get_base_model()
    for name, m in lora_layers(peft_model):
        parent_name, _, child = name.rpartition(".")
        parent = base.get_submodule(parent_name)
        setattr(parent, child, m.base_layer)
        swapped.append((parent, child, m))
    try:
        yield
    finally:
        for parent, child, m in swapped:
            setattr(parent, child, m)


def load_any(path: str, dtype, flag: str = "--model"):
    """(model, tokenizer, engine path) for evaluate.py / tools/grade.py: a model directory or hub name as
    engines.loading.load_model loads it, or a LoRA checkpoint merged onto its base (the engine path is then the base's:
    vLLM starts from it and receives the merged weights)."""
    from engines.loading import load_model

    if is_adapter_dir(path):
        return (*load_for_inference(path, dtype, flag), base_path(path))
    return (*load_model(path, dtype, flag), path)


def load_for_inference(path: str, dtype, flag: str = "--model"):
    """(model, tokenizer) from a LoRA checkpoint directory: its base (adapter_config.json) + the adapter, merged."""
    from peft import PeftModel

    from engines.loading import load_model

    base, _ = load_model(base_path(path), dtype, flag=f"{flag} {path} (its base model)")
    tok = _tokenizer(path, flag)
    peft_model = PeftModel.from_pretrained(base, path)
    return merged_model(peft_model).eval(), tok


def _tokenizer(path: str, flag: str):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {flag} {path!r}: no tokenizer in the adapter checkpoint: {str(e).splitlines()[0]}")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def main(argv=None):
    from tools.cli import ArgParser

    ap = ArgParser(prog="-m trainer.lora", description="Write a plain model directory: a LoRA checkpoint's base + "
                        "adapter, merged.")
    ap.add_argument("--merge", required=True, help="LoRA checkpoint directory (train.py --lora-rank R writes them)")
    ap.add_argument("--out", required=True, help="output directory for the merged model (save_pretrained + tokenizer)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="dtype of the merged weights")
    a = ap.parse_args(argv)
    if not is_adapter_dir(a.merge):
        raise SystemExit(f"error: --merge {a.merge!r}: not a LoRA checkpoint (no {ADAPTER_CONFIG})")
    if os.path.isfile(a.out) or (os.path.isdir(a.out) and os.listdir(a.out)):
        raise SystemExit(f"error: --out {a.out!r}: {'a file' if os.path.isfile(a.out) else 'a directory with files in it'}"
                         "; give a new directory (e.g. runs/merged)")
    model, tok = load_for_inference(a.merge, getattr(torch, a.dtype), flag="--merge")
    model.save_pretrained(a.out)
    tok.save_pretrained(a.out)
    if os.path.exists(os.path.join(a.merge, "run_config.json")):  # the run's settings travel with its weights
        import shutil  # (evaluate.py reads them: the merged model is evaluated as its run was)

        shutil.copy(os.path.join(a.merge, "run_config.json"), os.path.join(a.out, "run_config.json"))
    print(f"merged model written to {a.out}")


if __name__ == "__main__":
    import sys

    from tools.cli import cli

    sys.exit(cli(main))
