"""The course's notebooks with their outputs: run each one top to bottom in a fresh kernel (nbclient, as the tests do)
and write it back with what it printed and drew, so that a student reads the numbers and the plots without running
anything (GitHub shows them).

    python course/notebooks.py                  # all of them, in place (~4 min on a quiet 2-core machine)
    python course/notebooks.py 03 08            # some (a name's prefix)
    python course/notebooks.py --check          # run them and say which committed outputs are stale; write nothing

tests/test_course.py runs every notebook and fails when what it prints differs from what is committed, compared by
`stale` below: text exactly, after `normalise` hides what legitimately varies from run to run (wall times, progress-bar
rates, the temporary runs directory, object addresses); a figure by its presence only (a PNG's bytes depend on the
matplotlib release); a cell tagged `outputs-vary` (thread timing, the sandbox's isolation on this machine) by the
presence of its outputs only. Where the committed outputs were made on a CPU whose float kernels differ from this
one's (`machine()`: torch's release, CPU capability, AVX2 vs AVX512, and the CPU's make, Intel vs AMD), a training run
can go its own way after a few steps (docs/runs.md, "What repeats"), so there the numbers are masked too and only the
words are compared.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import sys
import tempfile

try:
    import nbformat
except ImportError:  # the test extras are not installed: main() says what to install, in one line
    nbformat = None

COURSE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(COURSE) not in sys.path:
    sys.path.insert(0, os.path.dirname(COURSE))  # the project (tools.cli)
INSTALL = "the course's notebooks run with the test extras: pip install -e '.[test]'"
NOTEBOOKS = sorted(glob.glob(os.path.join(COURSE, "*.ipynb")))
COMMAND = "python course/notebooks.py"

from tools.cli import cli, need_module  # noqa: E402


def machine() -> str:
    """What decides a run's last float bits here: torch's CPU kernels (docs/runs.md, "What repeats") and the CPU's
    make: with the same instructions an AMD CPU runs other float kernels than an Intel one (notebook 03's Countdown
    run ends at avg@4 0.195 on an AMD EPYC, 0.240 on Intel CPUs with AVX512 kernels)."""
    import torch

    from runs import machine as this

    cpu = this()["cpu"]
    make = next((m for m in ("Intel", "AMD") if m in cpu), cpu or "unknown")
    return f"torch {torch.__version__.split('+')[0]}, {torch.backends.cpu.get_cpu_capability()} kernels, {make} CPU"


class CellFailed(RuntimeError):
    pass


def execute(path: str, runs: str | None = None) -> nbformat.NotebookNode:
    """The notebook at `path` run top to bottom in a fresh kernel; its short training runs go under `runs`."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    runs = runs or tempfile.mkdtemp(prefix="grpo-course-runs-")
    os.makedirs(runs, exist_ok=True)
    env = dict(os.environ, GRPO_COURSE_RUNS=runs)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": COURSE}},
                            record_timing=False)
    old = os.environ.copy()
    os.environ.update(env)  # the kernel inherits it
    try:
        client.execute()
    except CellExecutionError as e:
        i = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code" and
                  any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
        where = (f"cell {i + 1} of {len(nb.cells)} ({nb.cells[i].source.splitlines()[0][:60]!r})" if i is not None
                 else "a cell")
        raise CellFailed(f"course/{os.path.basename(path)}: {where} failed: {e.ename}: {e.evalue}") from None
    finally:
        os.environ.clear()
        os.environ.update(old)
    nb.metadata["outputs_from"] = machine()
    nb.metadata.pop("widgets", None)
    for c in nb.cells:
        c.metadata.pop("execution", None)
    return nb


# what varies from one run of the same code to the next (each pattern, then what stands for it)
VARIES = [
    (re.compile(r"\S*grpo-course-runs[^/\s]*"), "RUNS"),  # the runs directory (temporary, or $GRPO_COURSE_RUNS)
    (re.compile(r"\d+%\|[^|\n]*\|"), "N%|BAR|"),  # a progress bar (its width follows the length of its rate)
    (re.compile(r"\[(?:\d+:)?\d+:\d\d<(?:(?:\d+:)?\d+:\d\d|\?)(?:,\s*(?:[\d.]+|\?)\s*[^\s,\]]*/[^\s,\]]*)?"),
     "[TIME"),  # a progress bar's elapsed<remaining, rate
    (re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:s|ms|µs|min)\b"), "N s"),  # a wall time: "(34 s)", "68s)", "in 1.13 s"
    (re.compile(r"\b0x[0-9a-f]{6,}\b"), "0x?"),  # object addresses
]
# A cell tagged so (its metadata "tags") shows what depends on the machine or the moment: thread timing, the sandbox's
# isolation. Its outputs are compared by their presence only (text, a figure), not by what they say.
VARIES_TAG = "outputs-vary"
NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")


def normalise(text: str, numbers: bool = True) -> str:
    for pattern, stand_in in VARIES:
        text = pattern.sub(stand_in, text)
    return text if numbers else NUMBER.sub("N", text)


def shown(cell) -> tuple[list[str], int]:
    """A code cell's outputs as text (streams joined per stream, text/plain, errors) and how many images it shows."""
    texts, images, streams = [], 0, {}
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            streams[o.name] = streams.get(o.name, "") + o.text
        elif o.output_type in ("display_data", "execute_result"):
            if "image/png" in o.data or "image/svg+xml" in o.data:
                images += 1
            elif "text/plain" in o.data:
                texts.append(o.data["text/plain"])
        elif o.output_type == "error":
            texts.append(f"{o.ename}: {o.evalue}")
    return [f"[{k}] {v}" for k, v in sorted(streams.items())] + texts, images


def stale(committed: nbformat.NotebookNode, fresh: nbformat.NotebookNode) -> list[str]:
    """How the committed notebook's outputs differ from a fresh run's (empty: up to date), one line per cell."""
    numbers = committed.metadata.get("outputs_from") == fresh.metadata.get("outputs_from")
    old = [c for c in committed.cells if c.cell_type == "code"]
    new = [c for c in fresh.cells if c.cell_type == "code"]
    if [c.source for c in old] != [c.source for c in new]:
        return ["the code cells differ (was the fresh run made from this notebook?)"]
    out = []
    for i, (a, b) in enumerate(zip(old, new)):
        (ta, ia), (tb, ib) = shown(a), shown(b)
        where = f"code cell {i + 1} ({a.source.splitlines()[0][:50]!r})" if a.source else f"code cell {i + 1}"
        if a.get("execution_count") != i + 1:
            out.append(f"{where}: execution count {a.get('execution_count')}, not {i + 1}")
        if (ia > 0) != (ib > 0):
            out.append(f"{where}: {ia} figure(s) committed, {ib} drawn now")
        if VARIES_TAG in b.metadata.get("tags", []):
            if bool(ta) != bool(tb):
                out.append(f"{where}: {'no text' if not ta else 'text'} committed, {'none' if not tb else 'text'} now")
            continue
        na = [normalise(t, numbers) for t in ta]
        nb_ = [normalise(t, numbers) for t in tb]
        if na != nb_:
            first = next((x, y) for x, y in zip(na + [""] * len(nb_), nb_ + [""] * len(na)) if x != y)
            line = next(((p, q) for p, q in zip(first[0].splitlines() + [""] * 99, first[1].splitlines() + [""] * 99)
                         if p != q), ("", ""))
            out.append(f"{where}: prints otherwise now: committed {line[0][:120]!r}, now {line[1][:120]!r}")
    return out


def small_png(data: str) -> str:
    """A figure (base64 PNG) on white, in 256 colours: a third of the bytes, the same to the eye (a line plot has few
    colours)."""
    import base64
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(data)))
    if image.mode == "P":  # done already
        return data
    image = image.convert("RGBA")
    flat = Image.new("RGB", image.size, "white")
    flat.paste(image, mask=image.split()[3])
    out = io.BytesIO()
    flat.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(out, "PNG", optimize=True)
    small = base64.b64encode(out.getvalue()).decode()
    return small if len(small) < len(data) else data


def write(path: str, nb: nbformat.NotebookNode) -> None:
    """The notebook with its outputs, its figures made small."""
    for c in nb.cells:
        for o in c.get("outputs", []):
            if "image/png" in o.get("data", {}):
                o.data["image/png"] = small_png(o.data["image/png"])
    nbformat.validate(nb)
    with open(path, "w") as f:
        nbformat.write(nb, f)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="notebooks to run (a file name's prefix, e.g. 03); default: all")
    ap.add_argument("--check", action="store_true", help="compare with the committed outputs; write nothing")
    a = ap.parse_args(argv)
    for name in ("nbformat", "nbclient", "ipykernel"):  # (the kernels set torch's threads: lab.setup)
        need_module(name, INSTALL)
    paths = [p for p in NOTEBOOKS if not a.names or any(os.path.basename(p).startswith(n) for n in a.names)]
    if not paths:
        print(f"error: no notebook in course/ starts with {' or '.join(a.names)}", file=sys.stderr)
        return 2
    bad = 0
    for path in paths:
        name = os.path.basename(path)
        fresh = execute(path)
        if a.check:
            diff = stale(nbformat.read(path, as_version=4), fresh)
            bad += bool(diff)
            print(f"{name}: " + ("up to date" if not diff else "stale\n  " + "\n  ".join(diff)), flush=True)
        else:
            write(path, fresh)
            print(f"{name}: written ({os.path.getsize(path) / 1024:.0f} KB)", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(cli(main))
