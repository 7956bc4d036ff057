"""On a CUDA GPU, one command: every figure this project measures there, in about eight minutes on one H100, into one
results file (bench/results/gpu_check_<device>.md, and .json beside it; its header names the commit). Run on an H100
before `--rollout auto` chose HF generate there: bench/results/gpu_check_nvidia_h100_80gb_hbm3.md (407 s; the gen part
reached its limit before the static-cache row, and the TRL part's settings check then also compared the CPU thread
count, which no longer counts on a GPU). The CPU dry run below is what the test suite runs.

    python bench/gpu_check.py                     # on the GPU machine (device, driver, versions, commit in the header)
    python bench/gpu_check.py --parts gen,update  # some parts only
    python bench/gpu_check.py --dry-run           # the same script on the CPU, tiny shapes (tests/test_gpu_check.py)
    python bench/gpu_check.py --fetch-wheels      # where pip has network: wheels of what a GPU image may lack, in .whl/

Parts, in this order, each in a child process with its own time limit (seconds, full run); a part that outruns its
limit is stopped, the rows it finished are kept and marked, and the next part starts. The results file is rewritten
after every part, so a run cut short still leaves the parts done.
  tests  (40)  python -m pytest -m cuda over the test files that hold such tests: the tests marked `cuda`
               (tests/test_gpu_path.py: fused AdamW's step, the fast engine on the GPU at k = 1 and 16); the pinned
               CPU runs are not among them. Pass/fail counts.
  train (120)  train.py for 6 steps, 40 s each: the tiny model (models/tiny-qwen2, its defaults), the chat model
               (models/tiny-qwen2-chat, examples/tiny-qwen2-chat-cpu.sh's flags) full and LoRA (r 8): s/step and
               generation s/step (medians from step 2), response tokens/s, held-out greedy accuracy (200 problems)
               before and after. bf16-mixed (train.py's --dtype auto on a GPU).
  gen   (150)  generated tokens/s at Qwen2.5-0.5B and -1.5B shapes, random weights, full depth (bench/gpu.py's
               build, full: fp32 weights under bf16 autocast, as train.py generates), 64 rows x 512 new tokens
               (1.5B: x 128) from 64-token prompts: transformers' generate (HFEngine, --rollout auto's choice on a
               GPU), the fast engine (a host check per token, its default), and generate with
               cache_implementation="static" (a preallocated cache; transformers compiles the decode step on CUDA, here in a warm-up call of the measured size; on bf16 weights, since
               the cache takes the dtype of the first keys and fp32 weights under autocast give it fp32 and bf16
               ones), and last the fast engine with a host check every 16 tokens. Rows in order of need.
  update (60)  one update's peak memory and tokens/s at those shapes (bench/gpu.py's update: 2 x (256 + 1,024) tokens,
               checkpointing, LM-head chunk 256): full with AdamW fused (train.py's CUDA step) and foreach (torch's
               default, bench/results/gpu_h100.md's), LoRA r 16 fused.
  trl    (95)  bench/vs_trl.py --reps 1 --steps 4: this project's train.py and TRL's GRPOTrainer on the tiny model,
               the same settings, side by side (median s/step from step 2, response tokens/s, the speed ratio).
Without TRL (or math-verify, which train.py's reward needs) the part says so and is skipped; --fetch-wheels downloads
them (and their missing dependencies) as wheels for a GPU machine without network: install them there with
`python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl` and `export PYTHONPATH=/tmp/site`.
--dry-run: the same parts on the CPU at tiny sizes (the tests collected, not run; the chat model's LoRA run for 1
training step on 2 held-out problems, the other two runs' flags parsed only; a 2-layer Qwen2 of the chat model's
widths for gen and update, 4 rows x 4 tokens; one TRL step of 2 x 2); the results file goes to --out (default: a new
temporary folder) as gpu_check_cpu-dry-run.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the project is one folder up
sys.path.insert(0, os.path.join(ROOT, "bench"))  # bench/gpu.py
sys.path.insert(0, ROOT)  # before bench/: the project's modules win over a benchmark of the same name

from tools.cli import ArgParser, cli, set_threads  # noqa: E402

PARTS = ("tests", "train", "gen", "update", "trl")
LIMITS = {"tests": 40, "train": 120, "gen": 150, "update": 60, "trl": 95}  # seconds, full run: 465 in all
DRY_LIMITS = {"tests": 60, "train": 90, "gen": 60, "update": 60, "trl": 90}
WHEELS = ("math-verify==0.9.0", "latex2sympy2_extended==1.11.0", "antlr4-python3-runtime==4.13.2", "trl==1.16.0",
          "datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19", "fsspec==2026.9.0")
GB = 2**30

TRAIN_RUNS = [  # (name, train.py flags)
    ("tiny-qwen2", ["--model", "models/tiny-qwen2"]),
    ("tiny-qwen2-chat full", ["--model", "models/tiny-qwen2-chat", "--template", "chat", "--reward", "math",
                              "--batch-size", "256", "--group-size", "8", "--max-new-tokens", "64", "--lr", "1e-4"]),
    ("tiny-qwen2-chat LoRA r 8", ["--model", "models/tiny-qwen2-chat", "--template", "chat", "--reward", "math",
                                  "--batch-size", "256", "--group-size", "8", "--max-new-tokens", "64", "--lr", "1e-4",
                                  "--lora-rank", "8"]),
]


# ---- running a part ---------------------------------------------------------------------------------------------
def run_limited(cmd: list[str], limit: float, env=None) -> tuple[str, int | None, float]:
    """(stdout + stderr, exit code or None when stopped at `limit`, seconds): the command in its own process group,
    killed whole (its children too) at the limit."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, env=env)
    try:
        out, _ = p.communicate(timeout=max(1.0, limit))
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc = None
    return out or "", rc, time.perf_counter() - t0


def status_of(rc, limit) -> str:
    return "ok" if rc == 0 else f"stopped at its {limit:.0f} s limit" if rc is None else f"failed (exit code {rc})"


def tail(text: str, n: int = 15) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip() and "it/s" not in ln and "Loading weights" not in ln]
    return "\n".join(lines[-n:])


def importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# ---- (a) tests ---------------------------------------------------------------------------------------------------
def part_tests(a, limit):
    tests = os.path.join(ROOT, "tests")
    files = sorted(os.path.join("tests", f) for f in os.listdir(tests)  # the files with a `cuda` test (collecting
                   if f.startswith("test_") and f.endswith(".py")  # every test file takes 20 s)
                   and "mark.cuda" in open(os.path.join(tests, f)).read())
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", *files]
    if a.dry_run:
        cmd.append("--collect-only")  # on the CPU: the selection only (the tests themselves skip without CUDA)
    out, rc, wall = run_limited(cmd, limit)
    counts = r"\d+ (passed|failed|skipped|error|tests? collected|deselected)|no tests ran"
    last = [ln.strip(" =") for ln in out.splitlines() if re.search(counts, ln)]
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
    ok = rc == 0 or (rc == 5 and a.dry_run)  # 5: nothing selected
    return {"status": "ok" if ok else status_of(rc, limit), "wall_s": wall, "command": " ".join(["python", *cmd[1:]]),
            "summary": last[-1] if last else tail(out, 3), "failed": failed, "log_tail": tail(out) if not ok else ""}


# ---- (b) train.py ------------------------------------------------------------------------------------------------
def part_train(a, limit):
    if not importable("math_verify"):
        return {"status": "skipped: math-verify is not importable (train.py's reward); see --fetch-wheels", "rows": []}
    small = (["--max-steps", "1", "--batch-size", "8", "--group-size", "4", "--max-new-tokens", "8", "--eval-problems",
              "2", "--reward-workers", "0"] if a.dry_run else ["--max-steps", "6", "--eval-problems", "200"])
    rows, t0 = [], time.perf_counter()
    each = limit / len(TRAIN_RUNS)
    for name, flags in TRAIN_RUNS:
        out_dir = tempfile.mkdtemp(prefix="gpu-check-train-")
        # later flags win: the run's own size flags over the model's example flags
        cmd = [sys.executable, "train.py", *flags, "--output-dir", out_dir, "--eval-every", "0", "--eval-samples", "0",
               "--save-every", "0", *small]
        if a.dry_run and name != TRAIN_RUNS[-1][0]:  # the dry run trains the last (chat, LoRA), parses the others
            from config import parse_config

            parse_config(cmd[2:])
            rows.append({"run": name, "status": "ok: flags parsed (dry run: not run)", "wall_s": 0.0, "steps": 0,
                         "s_per_step": None, "gen_s_per_step": None, "tokens_per_s": None, "acc_before": None,
                         "acc_after": None, "command": " ".join(cmd[1:]), "log_tail": ""})
            continue
        left = limit - (time.perf_counter() - t0)
        out, rc, wall = run_limited(cmd, min(each, left) if left > 0 else 1)
        hist = read_jsonl(os.path.join(out_dir, "metrics.jsonl"))
        evals = read_jsonl(os.path.join(out_dir, "evals.jsonl"))
        step = [r["perf/step_time_s"] for r in hist]
        gen = [r.get("perf/gen_time_s", float("nan")) for r in hist]
        tps = [r["perf/tokens_per_s"] for r in hist]
        acc = [e.get("eval/accuracy") for e in evals]
        shutil.rmtree(out_dir, ignore_errors=True)
        rows.append({"run": name, "status": status_of(rc, each), "wall_s": wall, "steps": len(hist),
                     "s_per_step": median_from_2(step), "gen_s_per_step": median_from_2(gen),
                     "tokens_per_s": median_from_2(tps), "acc_before": acc[0] if acc else None,
                     "acc_after": acc[-1] if len(acc) > 1 else None, "command": " ".join(cmd[1:]),
                     "log_tail": tail(out) if rc != 0 else ""})
    bad = [r["run"] for r in rows if not r["status"].startswith("ok")]
    return {"status": "ok" if not bad else "partial: " + ", ".join(bad), "wall_s": time.perf_counter() - t0, "rows": rows}


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    return [json.loads(ln) for ln in open(path) if ln.strip()]


def median_from_2(xs):
    xs = [x for x in xs if x == x]  # nan out
    return statistics.median(xs[1:] if len(xs) > 1 else xs) if xs else None


# ---- (c) generation and (d) one update: children that write a JSON line per finished row ------------------------
SHAPES = {"0.5B": (0, 64, 512, 2, 256, 1024), "1.5B": (0, 64, 128, 2, 256, 1024)}  # layers (0: full depth), gen rows,
DRY_SHAPES = {"dry": (2, 4, 4, 1, 8, 8)}  # gen new tokens, update micro-batch, prompt tokens, response tokens
DRY_MODEL = (128, 512, 2, 4, 2, True)  # the dry run's Qwen2: the chat model's widths, vocabulary 3,136 (its tokenizer's)


def dry_sizes(gpu) -> None:
    """--dry-run: bench/gpu.py builds the tiny 'dry' shape (the chat model's widths and vocabulary) instead of Qwen2.5's
    151,936-row vocabulary, whose LM head alone takes seconds a token on the CPU."""
    gpu.QWEN25["dry"] = DRY_MODEL
    gpu.VOCAB = 3136
GEN_ORDER = [("0.5B", "hf", None), ("0.5B", "fast", 1), ("1.5B", "hf", None), ("1.5B", "fast", 1),
             ("0.5B", "hf-static", None), ("0.5B", "fast", 16)]  # (size, engine, check_every)
DRY_GEN_ORDER = [("dry", "fast", None), ("dry", "fast", 16), ("dry", "hf", None), ("dry", "hf-static", None)]


def shape_name(size: str) -> str:
    return "tiny Qwen2 (dry run)" if size == "dry" else f"Qwen2.5-{size}"


def child_gen(a, emit):
    import torch
    from transformers import AutoTokenizer

    import gpu

    dev = "cuda" if torch.cuda.is_available() and not a.dry_run else "cpu"
    shapes = DRY_SHAPES if a.dry_run else SHAPES
    if a.dry_run:
        dry_sizes(gpu)
    tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models", "tiny-qwen2-chat"))  # a Qwen2.5-style BPE tokenizer
    built = {}
    for size, engine, k in DRY_GEN_ORDER if a.dry_run else GEN_ORDER:
        layers, rows, tokens = shapes[size][:3]
        if size not in built:
            built.clear()
            if dev == "cuda":
                torch.cuda.empty_cache()
            built[size] = gpu.build(size, "full", layers, dev)
        model = built[size]
        if engine == "hf-static":  # its cache takes the first keys' dtype: fp32 weights under autocast mix fp32 and bf16
            model.to(torch.bfloat16)
        # warm-up; the static cache's at the measured size (another batch or length would compile again)
        warm = (rows, tokens) if engine == "hf-static" else (min(8, rows), 8 if not a.dry_run else 2)
        gpu.generate(model, tok, *warm, dev, engine, k)
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        tps = gpu.generate(model, tok, rows, tokens, dev, engine, k)
        peak = torch.cuda.max_memory_allocated() / GB if dev == "cuda" else None
        name = {"fast": f"fast engine, host check every {k or 1} tokens", "hf": "HF generate",
                "hf-static": 'HF generate, cache_implementation="static", bf16 weights'}[engine]
        emit({"shape": shape_name(size), "layers": layers or None, "engine": name, "rows": rows, "tokens": tokens,
              "tokens_per_s": tps, "peak_gib": peak})


def child_update(a, emit):
    import torch

    import gpu

    dev = "cuda" if torch.cuda.is_available() and not a.dry_run else "cpu"
    if a.dry_run:
        dry_sizes(gpu)
    for size, (layers, _, _, micro, prompt, resp) in (DRY_SHAPES if a.dry_run else SHAPES).items():
        for mode, adamw in (("full", "fused"), ("full", "foreach"), ("lora", "fused")):
            model = gpu.build(size, mode, layers, dev)
            params = [p for p in model.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(params, lr=1e-7, **({"fused": True} if adamw == "fused" and dev == "cuda" else {}))
            g = torch.Generator().manual_seed(1)
            try:
                gpu.update(model, opt, micro, prompt, resp, dev, g)  # warm-up (and AdamW's states)
                gpu.sync(dev)
                if dev == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                gpu.update(model, opt, micro, prompt, resp, dev, g)
                gpu.sync(dev)
                dt = time.perf_counter() - t0
                peak = torch.cuda.max_memory_allocated() / GB if dev == "cuda" else None
                res = torch.cuda.max_memory_reserved() / GB if dev == "cuda" else None
                row = {"update_s": dt, "tokens_per_s": micro * (prompt + resp) / dt, "peak_gib": peak, "reserved_gib": res}
            except torch.OutOfMemoryError:
                row = {"update_s": None, "tokens_per_s": None, "peak_gib": "out of memory", "reserved_gib": None}
            emit({"shape": shape_name(size), "layers": layers or None, "mode": mode,
                  "adamw": adamw if dev == "cuda" else "torch's default (CPU)", "micro": micro, "prompt": prompt,
                  "resp": resp, **row})
            del model, opt, params
            if dev == "cuda":
                torch.cuda.empty_cache()


def part_rows(a, name, limit):
    fd, path = tempfile.mkstemp(suffix=".jsonl", prefix=f"gpu-check-{name}-")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--rows-to", path, *(["--dry-run"] if a.dry_run else [])]
    out, rc, wall = run_limited(cmd, limit)
    rows = read_jsonl(path)
    os.unlink(path)
    return {"status": status_of(rc, limit), "wall_s": wall, "rows": rows, "log_tail": tail(out) if rc != 0 else ""}


# ---- (e) vs TRL --------------------------------------------------------------------------------------------------
def part_trl(a, limit):
    if not importable("trl"):
        return {"status": "skipped: TRL is not importable; see --fetch-wheels", "lines": []}
    if not importable("math_verify"):
        return {"status": "skipped: math-verify is not importable (the reward of both sides); see --fetch-wheels", "lines": []}
    size = (["--reps", "1", "--steps", "1", "--prompts", "2", "--group", "2", "--max-new-tokens", "8"] if a.dry_run
            else ["--reps", "1", "--steps", "4"])
    cmd = [sys.executable, "bench/vs_trl.py", *size]
    out, rc, wall = run_limited(cmd, limit)
    keep = ("rep ", "settings", "versions", "median speed ratio")
    lines = [ln for ln in out.splitlines() if ln.startswith(keep) or re.match(r"\s*\d+\s+[\d.]+\s+[\d.]+", ln)
             or ln.strip().startswith("rep ")]
    return {"status": status_of(rc, limit), "wall_s": wall, "command": " ".join(cmd[1:]), "lines": lines,
            "log_tail": tail(out) if rc != 0 else ""}


# ---- the results file --------------------------------------------------------------------------------------------
def header(a) -> dict:
    import torch

    def version(mod):
        try:
            return __import__(mod).__version__
        except Exception:
            return "not installed"

    def git(*args):
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    cuda = torch.cuda.is_available() and not a.dry_run
    driver = ""
    if cuda:
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            driver = "unknown (no nvidia-smi)"
    commit = git("rev-parse", "--short", "HEAD") or "unknown (not a git checkout)"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " + uncommitted changes"
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "CPU (dry run)",
        "gpu_memory_gib": torch.cuda.get_device_properties(0).total_memory / GB if cuda else None,
        "driver": driver or None, "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
        "transformers": version("transformers"), "accelerate": version("accelerate"), "peft": version("peft"),
        "trl": version("trl"), "commit": commit, "cpu_count": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python bench/gpu_check.py " + " ".join(sys.argv[1:]),
    }


def fmt(x, spec=".2f"):
    return "" if x is None else x if isinstance(x, str) else format(x, spec)


def markdown(res: dict) -> str:
    h = res["header"]
    dev = h["device"] + (f", {h['gpu_memory_gib']:.1f} GiB, driver {h['driver']}" if h["driver"] else "")
    out = [f"# bench/gpu_check.py on {dev}; {h['date']}",
           f"torch {h['torch']}" + (f" (CUDA {h['cuda']})" if h["cuda"] else "") + f", transformers {h['transformers']}, "
           f"accelerate {h['accelerate']}, peft {h['peft']}, trl {h['trl']}; {h['cpu_count']} CPUs; commit {h['commit']}",
           f"`{h['command']}`: {res.get('wall_s', 0):.0f} s in all", "",
           "| part | status | limit s | wall s |", "|---|---|---|---|"]
    for p in res["parts"]:
        r = res["results"].get(p, {"status": "not reached"})
        out.append(f"| {p} | {r['status']} | {res['limits'][p]} | {fmt(r.get('wall_s'), '.0f')} |")
    R = res["results"]
    if "tests" in R:
        t = R["tests"]
        out += ["", "## (a) tests: `" + t.get("command", "") + "`", "", t.get("summary", "")]
        out += [f"- failed: {f}" for f in t.get("failed", [])]
    if "train" in R:
        out += ["", "## (b) train.py (bf16-mixed on a GPU), medians from step 2", "",
                "| run | steps | s/step | generation s/step | response tokens/s | greedy accuracy before | after | wall s | status |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in R["train"].get("rows", []):
            out.append(f"| {r['run']} | {r['steps']} | {fmt(r['s_per_step'])} | {fmt(r['gen_s_per_step'])} | "
                       f"{fmt(r['tokens_per_s'], ',.0f')} | {fmt(r['acc_before'], '.3f')} | {fmt(r['acc_after'], '.3f')} | "
                       f"{r['wall_s']:.0f} | {r['status']} |")
        if R["train"].get("rows"):
            out.append(f"\ncommand (tiny): `{R['train']['rows'][0]['command']}`")
    if "gen" in R:
        out += ["", "## (c) generation, random weights at full depth (fp32 weights, bf16 autocast), temperature 1", "",
                "| shape | engine | rows x new tokens | tokens/s | peak GiB |", "|---|---|---|---|---|"]
        for r in R["gen"].get("rows", []):
            shape = r["shape"] + (f" ({r['layers']} layer)" if r.get("layers") else "")
            out.append(f"| {shape} | {r['engine']} | {r['rows']} x {r['tokens']} | {fmt(r['tokens_per_s'], ',.0f')} | "
                       f"{fmt(r['peak_gib'])} |")
    if "update" in R:
        out += ["", "## (d) one update (bench/gpu.py's: checkpointing, LM-head chunk 256, bf16 autocast)", "",
                "| shape | mode | AdamW | tokens | update s | tokens/s | peak GiB | reserved GiB |",
                "|---|---|---|---|---|---|---|---|"]
        for r in R["update"].get("rows", []):
            shape = r["shape"] + (f" ({r['layers']} layer)" if r.get("layers") else "")
            out.append(f"| {shape} | {r['mode']} | {r['adamw']} | {r['micro']} x ({r['prompt']} + {r['resp']}) | "
                       f"{fmt(r['update_s'])} | {fmt(r['tokens_per_s'], ',.0f')} | {fmt(r['peak_gib'])} | "
                       f"{fmt(r['reserved_gib'])} |")
    if "trl" in R:
        out += ["", "## (e) this project vs TRL's GRPOTrainer: `" + R["trl"].get("command", "") + "`", "", "```"]
        out += R["trl"].get("lines", []) + ["```"]
    for p in res["parts"]:
        logs = [R.get(p, {}).get("log_tail", "")] + [r.get("log_tail", "") for r in R.get(p, {}).get("rows", [])]
        logs = [x for x in logs if x]
        if logs:
            out += ["", f"### {p}: the end of the output", "", "```", *logs, "```"]
    return "\n".join(out) + "\n"


def fetch_wheels(dest: str) -> None:
    plat = [x for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64") for x in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", *plat, "-d", dest, *WHEELS]
    r = subprocess.run(cmd)
    if r.returncode:
        raise SystemExit(f"error: pip download failed (exit code {r.returncode})")
    print(f"wheels in {dest}: {', '.join(sorted(os.listdir(dest)))}")


def main():
    ap = ArgParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="the same parts on the CPU at tiny sizes")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--out", default=None, help="folder of the results file (default: bench/results; dry run: a new "
                                                "temporary folder)")
    ap.add_argument("--fetch-wheels", nargs="?", const=os.path.join(ROOT, ".whl"), default=None, metavar="DIR",
                    help="download the wheels of TRL, datasets and math-verify (and what they need beyond a CUDA "
                         "PyTorch image) for Python 3.12 on Linux x86-64 into DIR (default .whl/), then stop")
    ap.add_argument("--child", choices=["gen", "update"], help=argparse.SUPPRESS)
    ap.add_argument("--rows-to", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.fetch_wheels:
        return fetch_wheels(a.fetch_wheels)
    if a.child:
        def emit(row):
            with open(a.rows_to, "a") as f:
                f.write(json.dumps(row) + "\n")

        set_threads()  # train.py's default on the CPU (a dry run); nothing on a GPU
        return (child_gen if a.child == "gen" else child_update)(a, emit)
    parts = [p.strip() for p in a.parts.split(",") if p.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad or not parts:
        raise SystemExit(f"error: --parts {a.parts!r}: expected a comma-separated list of {', '.join(PARTS)}")
    import torch

    if not a.dry_run and not torch.cuda.is_available():
        raise SystemExit("error: torch sees no CUDA device (torch.cuda.is_available() is False); --dry-run runs the "
                         "same parts on the CPU at tiny sizes")
    out_dir = a.out or (tempfile.mkdtemp(prefix="gpu-check-") if a.dry_run else os.path.join(ROOT, "bench", "results"))
    os.makedirs(out_dir, exist_ok=True)
    limits = DRY_LIMITS if a.dry_run else LIMITS
    res = {"header": header(a), "parts": parts, "limits": {p: limits[p] for p in parts}, "results": {}}
    slug = "cpu-dry-run" if a.dry_run else re.sub(r"[^a-z0-9]+", "_", res["header"]["device"].lower()).strip("_")
    base = os.path.join(out_dir, f"gpu_check_{slug}")
    print(f"{res['header']['device']}; torch {res['header']['torch']}; commit {res['header']['commit']}; "
          f"parts {', '.join(parts)} (limits {', '.join(str(limits[p]) for p in parts)} s)", flush=True)
    t0 = time.perf_counter()
    for p in parts:
        print(f"{p} ...", flush=True)
        if p == "tests":
            r = part_tests(a, limits[p])
        elif p == "train":
            r = part_train(a, limits[p])
        elif p == "trl":
            r = part_trl(a, limits[p])
        else:
            r = part_rows(a, p, limits[p])
        res["results"][p] = r
        res["wall_s"] = time.perf_counter() - t0
        with open(base + ".json", "w") as f:
            json.dump(res, f, indent=1)
        with open(base + ".md", "w") as f:
            f.write(markdown(res))
        print(f"{p}: {r['status']} ({r.get('wall_s') or 0:.0f} s)", flush=True)
    print(open(base + ".md").read())
    print(f"written: {base}.md and {base}.json")


if __name__ == "__main__":
    sys.exit(cli(main))
