"""bench/gpu_check.py's CPU dry run: the one GPU command runs every part end to end at tiny sizes and writes its
results file, so the script cannot rot between the rare GPU sessions.

Run:  python -m pytest tests/test_gpu_check.py -q        (about a minute on 2 idle cores; the TRL part: -m slow)
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dry_run(tmp_path, parts):
    r = subprocess.run([sys.executable, "bench/gpu_check.py", "--dry-run", "--parts", parts, "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.load(open(tmp_path / "gpu_check_cpu-dry-run.json"))
    assert res["header"]["device"] == "CPU (dry run)" and res["header"]["commit"] and res["header"]["torch"]
    return res["results"], open(tmp_path / "gpu_check_cpu-dry-run.md").read()


def test_dry_run_writes_every_part(tmp_path):
    """Every part but the TRL comparison (the slow test below runs that one: it trains with TRL's trainer too)."""
    R, md = dry_run(tmp_path, "tests,train,gen,update")
    assert list(R) == ["tests", "train", "gen", "update"]
    assert R["tests"]["status"] == "ok" and "collected" in R["tests"]["summary"]
    assert [row["run"] for row in R["train"]["rows"]] == ["tiny-qwen2", "tiny-qwen2-chat full", "tiny-qwen2-chat LoRA r 8"]
    *parsed, lora = R["train"]["rows"]  # the LoRA run trained one step, accuracy before and after; the others parsed
    assert all(row["status"] == "ok: flags parsed (dry run: not run)" for row in parsed)
    assert lora["status"] == "ok" and lora["steps"] == 1 and lora["s_per_step"] > 0
    assert lora["acc_before"] is not None and lora["acc_after"] is not None
    assert R["gen"]["status"] == "ok" and len(R["gen"]["rows"]) == 4 and all(x["tokens_per_s"] > 0 for x in R["gen"]["rows"])
    assert R["update"]["status"] == "ok" and [x["mode"] for x in R["update"]["rows"]] == ["full", "full", "lora"]
    for part in ("(a) tests", "(b) train.py", "(c) generation", "(d) one update"):
        assert part in md


@pytest.mark.slow
def test_dry_run_trl_part(tmp_path):
    R, md = dry_run(tmp_path, "trl")
    assert list(R) == ["trl"]
    if R["trl"]["status"].startswith("skipped"):  # TRL is the `test` extra's; without it the part says so
        assert "TRL is not importable" in R["trl"]["status"]
    else:
        assert R["trl"]["status"] == "ok" and any(ln.startswith("median speed ratio") for ln in R["trl"]["lines"])
    assert "(e) this project vs TRL" in md


def test_bad_parts_is_one_error_line():
    r = subprocess.run([sys.executable, "bench/gpu_check.py", "--dry-run", "--parts", "gen,nope"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and r.stderr.strip().splitlines() == [
        "error: --parts 'gen,nope': expected a comma-separated list of tests, train, gen, update, trl"]
