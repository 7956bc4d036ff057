"""Proof, without a GPU, that the README's GPU install resolves: `pip install --dry-run` of the project with its `gpu`
extra for Linux x86-64, wheels only, against PyPI alone, and what it would install.

    python -m tools.resolve_gpu                          # Python 3.11, glibc 2.35 (Ubuntu 22.04), the `gpu` extra
    python -m tools.resolve_gpu --python 3.12 --glibc 2.31 --report /tmp/gpu.json

pip reads the wheels' own metadata (PEP 658: the METADATA files, not the gigabytes of wheels), so it needs PyPI only
and takes one to a few minutes, network-bound. The machine's pip configuration (extra indexes, local wheel directories, constraints) is
left out (PIP_CONFIG_FILE=/dev/null, no PIP_* settings but the certificate and timeout), so the answer is PyPI's, as a
fresh virtual environment on a GPU node sees it. `--platform` lists every manylinux tag up to the glibc given: pip
matches the tags literally. Prints the versions of torch, vllm, transformers, accelerate, peft, triton, flashinfer,
the CUDA release torch's wheel requires (its `cuda-toolkit` / `nvidia-*-cuXX` requirements) and the time; exits 2 with
pip's own error line when the set does not resolve, and first checks its own pip (>= 23.3: the pip 23.2.1 that a fresh
Python 3.11 venv brings refuses the dry run's platform options, which says nothing about the set).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOWN = ("torch", "vllm", "transformers", "accelerate", "peft", "math-verify", "tokenizers", "triton", "flashinfer-python",
         "xgrammar", "numpy")
KEEP_ENV = ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")  # how to reach PyPI, not what to install


def platforms(glibc: str) -> list[str]:
    """Every manylinux tag a glibc of that version runs (pip does not expand --platform itself)."""
    major, minor = map(int, glibc.split("."))
    assert major == 2, glibc
    tags = [f"manylinux_2_{m}_x86_64" for m in range(minor, 4, -1)]
    return tags + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]


def dry_run(extra: str, python: str, glibc: str, report: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in KEEP_ENV}
    env["PIP_CONFIG_FILE"] = os.devnull  # no configuration file at all: PyPI as a fresh environment sees it
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", report,
           "--index-url", "https://pypi.org/simple", "--only-binary=:all:", "--python-version", python]
    for p in platforms(glibc):
        cmd += ["--platform", p]
    cmd.append(f"{ROOT}[{extra}]")
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return r, time.perf_counter() - t0


def summary(report: dict) -> dict:
    """{name: version} of what pip would install, the wheel of each, and torch's CUDA requirements."""
    got, wheels, torch_req = {}, {}, []
    for item in report["install"]:
        m = item["metadata"]
        name = m["name"].lower().replace("_", "-")
        got[name] = m["version"]
        wheels[name] = item.get("download_info", {}).get("url", "").rsplit("/", 1)[-1]
        if name == "torch":
            torch_req = [d for d in m.get("requires_dist", []) if re.match(r"(cuda|nvidia)", d)]
    return {"versions": got, "wheels": wheels, "torch_cuda_requires": torch_req}


def cuda_release(torch_req: list[str]) -> str | None:
    """The CUDA release torch's wheel is built for: its cuda-toolkit pin, else the -cuXX suffix of its nvidia wheels."""
    for d in torch_req:
        m = re.match(r"cuda-toolkit\[.*\]==([\d.]+)", d)
        if m:
            return m.group(1)
    for d in torch_req:
        m = re.match(r"nvidia-\S+-cu(\d+)", d)
        if m:
            return m.group(1)
    return None


MIN_PIP = (23, 3)  # the first pip that takes --platform with --dry-run without --target (23.2.1, what a Python 3.11
# venv brings, refuses: "Can not use any platform or abi specific options unless installing via '--target'")


def pip_version() -> tuple[int, ...]:
    r = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True)
    m = re.match(r"pip (\d+)\.(\d+)", r.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def main(argv=None) -> int:
    from tools.cli import ArgParser

    ap = ArgParser(prog="-m tools.resolve_gpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--extra", default="gpu", help="the project's extra(s) to resolve (default: gpu)")
    ap.add_argument("--python", default="3.11", help="target Python version (vLLM 0.32.0 needs >= 3.11)")
    ap.add_argument("--glibc", default="2.35", help="target glibc (2.35: Ubuntu 22.04; llguidance 1.7 needs >= 2.31)")
    ap.add_argument("--report", default="", help="keep pip's JSON report here (default: a temporary file)")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"2\.\d+", args.glibc):
        raise SystemExit(f"error: --glibc {args.glibc!r}: a glibc version such as 2.35")
    if pip_version() < MIN_PIP:
        raise SystemExit(f"error: this environment's pip is {'.'.join(map(str, pip_version()))}; the dry run needs pip >= "
                         f"{'.'.join(map(str, MIN_PIP))} (older ones refuse --platform without --target): python -m pip "
                         "install --upgrade pip, then run this again")
    report = args.report or os.path.join(tempfile.mkdtemp(prefix="resolve-gpu-"), "report.json")
    print(f"resolving grpo-recipes[{args.extra}] for Linux x86-64, Python {args.python}, glibc {args.glibc}, "
          "wheels only, PyPI only (pip --dry-run) ...", flush=True)
    r, secs = dry_run(args.extra, args.python, args.glibc, report)
    if r.returncode != 0:
        errs = [ln for ln in r.stderr.splitlines() if ln.startswith("ERROR:")]
        print(f"error: grpo-recipes[{args.extra}] does not resolve ({secs:.0f} s): "
              f"{errs[-1][7:] if errs else r.stderr.strip()[-300:]}", file=sys.stderr)
        return 2
    s = summary(json.load(open(report)))
    v = s["versions"]
    print(f"resolved in {secs:.1f} s: {len(v)} distributions (pip's report: {report})")
    for name in SHOWN:
        if name in v:
            print(f"  {name:<18} {v[name]:<14} {s['wheels'][name]}")
    print(f"  torch's CUDA: {cuda_release(s['torch_cuda_requires']) or 'none (a CPU build)'} "
          f"({'; '.join(d.split(';')[0] for d in s['torch_cuda_requires'])})")
    nv = sorted(k for k in v if k.startswith("nvidia-"))
    print(f"  {len(nv)} nvidia-* wheels: " + ", ".join(f"{k} {v[k]}" for k in nv))
    return 0


if __name__ == "__main__":
    from tools.cli import cli

    sys.exit(cli(main))
