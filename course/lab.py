"""Notebook plumbing: put the project on sys.path, quiet the libraries, and run `train.py` as a student would.

`train(name, *flags)` runs `python train.py --output-dir RUNS/<name> --overwrite <flags>` in a subprocess (the real
command line, progress and all, of which the last lines are shown) and returns the run's metrics.jsonl rows.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# each notebook session its own directory (two notebooks, or a notebook and the test suite, may run at once)
RUNS = os.environ.get("GRPO_COURSE_RUNS") or tempfile.mkdtemp(prefix="grpo-course-runs-")
FAST = ("--eval-every", "0", "--eval-problems", "100", "--eval-samples", "0")  # short runs: greedy eval, start and end


def setup(threads: int = 1, dpi: int = 72) -> None:
    """One torch thread (the project's default, train.py --threads), no library progress bars, and figures at `dpi`
    (the committed notebooks carry them: python course/notebooks.py)."""
    import warnings

    import matplotlib

    warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto in a kernel without ipywidgets
    import torch

    from trainer import setup as trainer_setup

    torch.set_num_threads(threads)
    matplotlib.rcParams["figure.dpi"] = dpi
    trainer_setup.quiet_libraries()


def train(name: str, *flags: str, show: int = 1) -> list[dict]:
    """Run train.py with `flags` into a fresh run directory; print the command, its last lines and the time taken."""
    out = os.path.join(RUNS, name)
    cmd = [sys.executable, "train.py", "--output-dir", out, "--overwrite", *flags]
    here = lambda s: s.replace(ROOT + os.sep, "")  # noqa: E731 (paths as typed in the project directory, where it runs)
    print("$ python " + here(" ".join(cmd[1:])))
    t0 = time.time()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    lines = [l.strip() for l in (r.stdout + r.stderr).replace("\r", "\n").splitlines() if l.strip()]
    if r.returncode:
        raise RuntimeError(f"train.py exited with {r.returncode}:\n" + "\n".join(lines[-20:]))
    bars = [l for l in lines if re.search(r"\d+/\d+ \[", l)]  # the progress bar's redraws: its last state only
    text = [l for l in lines if l not in bars]
    print("\n".join("  " + here(l) for l in bars[-1:] + text[-show:]), f"\n  ({time.time() - t0:.0f} s)")
    return metrics(name)


def metrics(name: str) -> list[dict]:
    """The metrics.jsonl rows of run `name` (one per step)."""
    with open(os.path.join(RUNS, name, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f if l.strip()]


def series(rows: list[dict], key: str) -> list:
    return [r.get(key) for r in rows]
