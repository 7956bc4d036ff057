"""The README's commands do what it says: its "Next commands" run in order, as written, after the first run, in a
fresh directory; the recipes table (docs/recipes.md, linked from the README) is the one bench/recipes.py renders from
its results file; the Countdown section's search and command are what it says; and (slow) the first run and the
Countdown run print the last lines the README shows.

Run:  python -m pytest -q tests/test_readme.py       (~40 s; -m slow adds the full default run, ~2-4 min)
"""
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

import config
import evaluate
import train
from tools.cli import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md")).read()
# shortened where the test notes it: every new run is 2 small steps (the commands' own flags are kept)
SHORT = ["--max-steps", "2", "--eval-problems", "8", "--eval-samples", "2", "--batch-size", "16", "--group-size", "4",
         "--mini-batch-size", "16", "--reward-workers", "0"]


def next_commands() -> list[str]:
    block = README.split("## Next commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [c for c in (line.split("#", 1)[0].strip() for line in block.splitlines()) if c]


def run(cmd: str, capsys) -> tuple[int, str, str]:
    """One README command, in this process (the same entry points as `python SCRIPT`): (exit code, stdout, stderr)."""
    argv = shlex.split(cmd)
    assert argv[0] == "python", cmd
    main = {"train.py": train.main, "evaluate.py": evaluate.main}[argv[1]]
    args = argv[2:]
    if argv[1] == "train.py" and "--resume" not in args and "--help" not in args:
        args += SHORT
    capsys.readouterr()
    try:
        code = cli(main, args)
    except SystemExit as e:  # --help, a finished run
        code = e.code or 0
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_next_commands_run_in_order_after_the_first_run(tmp_path, monkeypatch, capsys):
    cmds = next_commands()
    assert cmds[0].startswith("python evaluate.py --model runs/default/checkpoint-40") and len(cmds) >= 6
    monkeypatch.chdir(tmp_path)
    code, out, err = run("python train.py", capsys)  # the README's first run
    assert code == 0, err[-2000:]
    summary = json.load(open("runs/default/summary.json"))
    for cmd in cmds:
        if cmd.startswith("python -m pytest"):
            argv = shlex.split(cmd)
            r = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, r.stdout[-2000:]
            continue
        cmd = cmd.replace("checkpoint-40", "checkpoint-2")  # --max-steps shortened to 2
        code, out, err = run(cmd, capsys)
        assert code == 0, f"{cmd}\n{err[-2000:]}"
        if cmd.startswith("python evaluate.py"):  # "prints the accuracy the run printed last"
            got = json.loads(out)
            assert (got["accuracy"], got["avg@2"], got["pass@2"]) == (
                summary["accuracy_after"], summary["avg@2_after"], summary["pass@2_after"])
        if "--resume auto" in cmd:  # the dapo run is finished: it says so and changes nothing
            assert "its run is finished" in err
        if "--help" in cmd:
            assert "--output-dir" in out
    assert json.load(open("runs/dapo/config.json"))["recipe"] == "dapo"
    assert os.path.exists("runs/lag1/summary.json") and os.path.exists("runs/default/summary.json")


def test_recipes_table_is_the_bench_results():
    """docs/recipes.md's recipes table (the README links it) is bench/recipes.py's rendering of
    bench/results/recipes.json, every row of it."""
    sys.path.append(os.path.join(ROOT, "bench"))
    import recipes

    results = json.load(open(recipes.RESULTS))
    rows = results["rows"].values()  # one per recipe, and runs of a recipe on another kernel path (env)
    assert {r["recipe"] for r in rows if not r.get("env")} == set(config.RECIPES)
    assert all(r["recipe"].split(" [")[0] in config.RECIPES for r in rows if r.get("env"))
    assert all(re.fullmatch(r"[0-9a-f]{10}(\+changes)?", r["commit"]) for r in results["rows"].values())
    assert "](docs/recipes.md)" in README, "the README links the recipes table"
    doc = open(recipes.DOC).read()
    shown = doc.split(recipes.BEGIN, 1)[1].split(recipes.END, 1)[0].strip()
    assert shown == recipes.table(results), "docs/recipes.md's table is stale: python bench/recipes.py --update-docs"


def first_run_line() -> str:
    block = README.split("## The first run", 1)[1].split("```", 2)[1]
    return next(line for line in block.splitlines() if line.startswith("held-out greedy accuracy:"))


@pytest.mark.slow  # the default run itself: 40 steps, ~1.5 min on a quiet 2-core laptop, up to 4 min when shared
def test_the_first_run_prints_what_the_readme_shows(tmp_path):
    """`python train.py`'s last line, numbers for numbers (the time aside), as the README's first-run block shows it."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py")], cwd=tmp_path, capture_output=True, text=True,
                       timeout=1200, env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-2000:]
    last = r.stdout.strip().splitlines()[-1]
    strip = lambda s: re.sub(r"\d+s\)", "Ns)", s)  # noqa: E731 (the wall time varies)
    assert strip(last) == strip(first_run_line())


COUNTDOWN_SECTION = README.split("## Countdown: a task where the techniques act", 1)[1].split("\n## ", 1)[0]


def test_countdown_section_shows_attempt_traces_own_search_and_a_valid_command():
    """The README's Countdown search is the one tasks.countdown.attempt_trace writes, as its line says, and the run's
    command parses to the Countdown defaults the section states (level 1, GRPO, 200 steps of 16 x 8, 128 tokens)."""
    import random

    from tasks import countdown as cd

    shown = COUNTDOWN_SECTION.split("```\n", 2)[1].split("```", 1)[0].strip()
    assert shown == cd.attempt_trace({"numbers": [9, 6, 10], "target": 25}, random.Random(2), 8, 0.25)
    assert cd.countdown_reward(shown, {"numbers": [9, 6, 10], "target": 25}) == 1.0
    command = COUNTDOWN_SECTION.split("```bash", 1)[1].split("```", 1)[0].split("#", 1)[0].split()
    assert command[:2] == ["python", "train.py"]
    cfg = config.parse_config(command[2:])
    assert (cfg.train_data, cfg.recipe, cfg.max_steps, cfg.batch_size, cfg.group_size, cfg.max_new_tokens) == (
        "builtin-countdown", "grpo", 200, 128, 8, 128)


def countdown_run_line() -> str:
    block = COUNTDOWN_SECTION.split("```bash", 1)[1].split("```", 2)[2]
    return next(line for line in block.splitlines() if line.startswith("held-out greedy accuracy:"))


@pytest.mark.slow  # the Countdown run itself: 200 steps, ~10 minutes on 2 cores
def test_the_countdown_run_prints_what_the_readme_shows_and_learns(tmp_path):
    """`python train.py --train-data builtin-countdown`'s last line, numbers for numbers (the time aside), as the
    README's Countdown section shows it; held-out avg@4 rises by >= 0.1 (the least of the seeds measured: 0.11) and
    the curves a reader looks at are logged."""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--train-data", "builtin-countdown",
                        "--output-dir", "runs/countdown"], cwd=tmp_path, capture_output=True, text=True, timeout=3600,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-2000:]
    strip = lambda s: re.sub(r"\d+s\)", "Ns)", s)  # noqa: E731 (the wall time varies)
    assert strip(r.stdout.strip().splitlines()[-1].split(" (200 problems")[0]) == strip(countdown_run_line().split(" (200 problems")[0])
    run = tmp_path / "runs" / "countdown"
    summary = json.load(open(run / "summary.json"))
    assert summary["avg@4_after"] - summary["avg@4_before"] >= 0.1, summary
    rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
    assert len(rows) == 200 and all(k in rows[0] for k in ("policy/entropy", "rollout/response_length", "rollout/truncated_frac",
                                                            "rollout/frac_all_correct", "rollout/frac_all_wrong"))
    assert (run / "curves.png").exists()
