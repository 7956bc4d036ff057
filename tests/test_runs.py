"""Runs a user can trust (runs.py): one run per directory, resume checks its settings and says what it does, Ctrl-C
ends with one line and exit status 130, checkpoints are kept by cadence and pruned.

Run:  python -m pytest -q tests/test_runs.py          (~1 min)
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import config
import tools.cli
import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--batch-size", "16", "--group-size", "4", "--mini-batch-size", "16", "--eval-problems", "8",
         "--eval-samples", "0", "--max-new-tokens", "40", "--reward-workers", "0", "--eval-every", "0"]


def run(model, out, *args):
    return train.main(["--model", model, "--output-dir", str(out), *SMALL, *args])


def cli(argv, capsys):
    capsys.readouterr()  # what earlier runs printed
    code = tools.cli.cli(train.main, argv)
    return code, capsys.readouterr().err


def strip_perf(rows):
    return [{k: v for k, v in r.items() if not k.startswith("perf/") or k == "perf/grad_norm"} for r in rows]


def test_a_second_run_into_a_used_directory(tiny_model_path, tmp_path, capsys):
    out = tmp_path / "run"
    run(tiny_model_path, out, "--max-steps", "2", "--save-every", "1")
    before = {f: os.path.getmtime(out / f) for f in os.listdir(out)}
    code, err = cli(["--model", tiny_model_path, "--output-dir", str(out), *SMALL, "--max-steps", "1", "--recipe", "dapo"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: --output-dir {out} holds another run")
    assert "--resume auto" in err and "--overwrite" in err
    assert {f: os.path.getmtime(out / f) for f in os.listdir(out)} == before  # nothing touched
    run(tiny_model_path, out, "--max-steps", "1", "--recipe", "dapo", "--no-dynamic-sampling", "--overwrite")
    assert sorted(d for d in os.listdir(out) if d.startswith("checkpoint")) == ["checkpoint-1"]  # the old run's are gone
    assert json.load(open(out / "config.json"))["recipe"] == "dapo"
    assert len(open(out / "metrics.jsonl").readlines()) == 1
    assert all(json.loads(line)["step"] in (0, 1) for line in open(out / "samples.jsonl"))
    assert json.load(open(out / "config.json"))["model"] == tiny_model_path  # the model's path, even when built in


def test_resume_refuses_a_conflicting_flag_and_overrides_with_a_warning(tiny_model_path, tmp_path, capsys):
    out = tmp_path / "run"
    run(tiny_model_path, out, "--max-steps", "1")
    base = ["--model", tiny_model_path, "--output-dir", str(out), "--resume", "auto", "--max-steps", "2"]
    code, err = cli(base + ["--recipe", "dapo"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--recipe 'dapo' (the run: 'grpo')" in err
    code, err = cli(base + ["--eval-problems", "20", "--resume-override"], capsys)  # the evaluation never changes
    assert code == 2 and "--eval-problems 20 (the run: 8)" in err
    code, err = cli(base + ["--lr", "0.001"], capsys)
    assert code == 2 and "--resume-override applies them" in err
    code, err = cli(base + ["--lr", "0.001", "--resume-override"], capsys)
    assert code == 0 and "warning: --resume-override: --lr 0.001 replaces the run's 0.0001" in err
    assert "resuming from step 1 of" in err
    cfg = json.load(open(out / "config.json"))  # the run's settings came from the checkpoint, not from the defaults
    assert cfg["lr"] == 0.001 and cfg["batch_size"] == 16 and cfg["eval_problems"] == 8 and cfg["max_steps"] == 2
    s = json.load(open(out / "summary.json"))
    assert s["before"]["step"] == 0 and s["eval_problems"] == 8  # before and after: the same 8 problems


def test_resume_auto_says_what_it_does(tiny_model_path, tmp_path, capsys):
    out = tmp_path / "run"
    code, err = cli(["--model", tiny_model_path, "--output-dir", str(out), *SMALL, "--max-steps", "1", "--resume", "auto"], capsys)
    assert code == 0 and f"no checkpoint in {out}: starting fresh" in err
    code, err = cli(["--model", tiny_model_path, "--output-dir", str(out), "--max-steps", "2", "--resume", "auto"], capsys)
    assert code == 0 and f"resuming from step 1 of {out}" in err
    assert [json.loads(line)["step"] for line in open(out / "metrics.jsonl")] == [1, 2]


def test_checkpoints_by_default_and_the_newest_kept(tiny_model_path, tmp_path):
    out = tmp_path / "run"
    run(tiny_model_path, out, "--max-steps", "5", "--save-every", "1", "--keep-checkpoints", "2")
    assert sorted(d for d in os.listdir(out) if d.startswith("checkpoint")) == ["checkpoint-4", "checkpoint-5"]
    assert config.Config().save_every == config.Config().eval_every > 0  # the default run leaves checkpoints behind


def test_sigint_during_a_step(tiny_model_path, tmp_path):
    """Ctrl-C during step 4: exit 130, one line (step, last checkpoint, the resume command), no traceback, the
    step-2 checkpoint intact; resuming gives the uninterrupted run's metrics and weights."""
    args = ["--model", tiny_model_path, *SMALL, "--max-steps", "5", "--save-every", "2", "--seed", "5"]
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, "train.py", *args, "--output-dir", str(out)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while time.time() - t0 < 120:
        time.sleep(0.05)
        if (out / "checkpoint-2").is_dir() and os.path.exists(out / "metrics.jsonl") and \
                len(open(out / "metrics.jsonl").readlines()) >= 3:
            break
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    last = err.strip().splitlines()[-1]
    # the signal lands after step 3's metrics row: during step 4, or in step 3's last lines (under load)
    assert last.startswith(("interrupted during step 4 of 5; last checkpoint: ",
                            "interrupted during step 3 of 5; last checkpoint: ")) and last.endswith(
        f"resume with: python train.py --output-dir {out} --resume auto"), last
    assert sorted(d for d in os.listdir(out) if d.startswith("checkpoint")) == ["checkpoint-2"]
    assert (out / "checkpoint-2" / "trainer_state.pt").exists()
    resumed = train.main(["--output-dir", str(out), "--resume", "auto"])
    full = train.main([*args, "--output-dir", str(tmp_path / "full")])
    assert strip_perf(resumed) == strip_perf(full)


def test_resume_auto_before_the_first_checkpoint_restarts_that_run(tiny_model_path, tmp_path, capsys):
    """A run stopped before its first checkpoint leaves its config.json: `--resume auto` (the command its Ctrl-C
    line prints) starts that run again with its own settings (recipe, model, sizes), never the defaults; a flag that
    would change it is refused as on a checkpoint; on the finished run it says so and changes nothing."""
    out = tmp_path / "run"
    run(tiny_model_path, out, "--max-steps", "1", "--recipe", "dapo", "--no-dynamic-sampling", "--lr", "3e-5")
    import shutil
    shutil.rmtree(out / "checkpoint-1")  # what a Ctrl-C during step 1 leaves (no checkpoint, no summary)
    os.remove(out / "summary.json")
    code, err = cli(["--output-dir", str(out), "--resume", "auto", "--recipe", "grpo"], capsys)
    assert code == 2 and "--recipe 'grpo' (the run: 'dapo')" in err and "config.json" in err
    code, err = cli(["--output-dir", str(out), "--resume", "auto"], capsys)
    assert code == 0 and f"no checkpoint in {out}: its run (--recipe dapo, --model {tiny_model_path}) starts again" in err
    cfg = json.load(open(out / "config.json"))
    assert (cfg["recipe"], cfg["model"], cfg["lr"], cfg["batch_size"], cfg["dynamic_sampling"]) == (
        "dapo", tiny_model_path, 3e-5, 16, False)
    assert [json.loads(line)["step"] for line in open(out / "metrics.jsonl")] == [1]
    before = {f: os.path.getmtime(out / f) for f in os.listdir(out)}
    with pytest.raises(SystemExit) as e:
        cli(["--output-dir", str(out), "--resume", "auto"], capsys)
    assert e.value.code == 0 and f"{out}: its run is finished (step 1 of 1" in capsys.readouterr().err
    assert {f: os.path.getmtime(out / f) for f in os.listdir(out)} == before
    code, err = cli(["--output-dir", str(out), "--resume", str(tmp_path / "nope")], capsys)
    assert code == 2 and err.strip() == f"error: --resume '{tmp_path / 'nope'}': does not exist"


def test_extending_a_finished_run_keeps_every_evaluation(tiny_model_path, tmp_path):
    """A finished 4-step run (evaluations at 0, 2 and the final 4, with avg@k) extended to 6 with --resume auto
    --max-steps 6 = the uninterrupted 6-step run: evaluations at 0, 2, 4 (greedy, as a run of 6 has there) and 6, the
    same rows; the same metrics; samples.jsonl holds each evaluation's completions once."""
    args = ["--eval-every", "2", "--eval-samples", "2", "--save-every", "2", "--seed", "3"]
    out, full = tmp_path / "run", tmp_path / "full"
    run(tiny_model_path, out, "--max-steps", "4", *args)
    assert [json.loads(line)["step"] for line in open(out / "evals.jsonl")] == [0, 2, 4]
    extended = train.main(["--output-dir", str(out), "--resume", "auto", "--max-steps", "6"])
    uninterrupted = run(tiny_model_path, full, "--max-steps", "6", *args)
    assert strip_perf(extended) == strip_perf(uninterrupted)
    rows = [[json.loads(line) for line in open(d / "evals.jsonl")] for d in (out, full)]
    assert [r["step"] for r in rows[1]] == [0, 2, 4, 6] and rows[0] == rows[1]
    samples = [[json.loads(line)["step"] for line in open(d / "samples.jsonl")] for d in (out, full)]
    assert samples[0] == samples[1]


@pytest.mark.parametrize("where", ["generation", "evals row", "summary"])
def test_ctrl_c_in_the_final_evaluation_then_resume(tiny_model_path, tmp_path, monkeypatch, capsys, where):
    """Ctrl-C in the final evaluation (after the last checkpoint): its generation, between samples.jsonl and
    evals.jsonl, or while summary.json is written. The line says so (not "before the first step"); the resumed run
    leaves the uninterrupted run's evals.jsonl, samples.jsonl and summary.json (wall time aside): one final row with
    avg@k, each evaluation's completions once."""
    import evaluate

    args = ["--model", tiny_model_path, *SMALL, "--max-steps", "2", "--save-every", "2", "--eval-every", "2", "--eval-samples", "2",
            "--seed", "6"]
    out, full = tmp_path / "run", tmp_path / "full"
    calls, real_evaluate, real_summary = [], evaluate.evaluate, train.write_summary

    def stop(*a, **kw):
        raise KeyboardInterrupt

    def counted_evaluate(*a, **kw):  # the second call is the final evaluation's
        calls.append(1)
        return stop() if where == "generation" and len(calls) == 2 else real_evaluate(*a, **kw)

    def opened(path, mode="r", *a, **kw):
        if where == "evals row" and str(path).endswith("evals.jsonl") and mode == "a" and len(calls) == 2:
            stop()  # samples.jsonl has the final completions, evals.jsonl not yet its row
        return open(path, mode, *a, **kw)

    monkeypatch.setattr(evaluate, "evaluate", counted_evaluate)
    monkeypatch.setattr(train, "open", opened, raising=False)
    monkeypatch.setattr(train, "write_summary", stop if where == "summary" else real_summary)
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as e:
            train.main([*args, "--output-dir", str(out)])
    finally:
        signal.signal(signal.SIGINT, handler)  # runs.interrupted ignores a second Ctrl-C from then on
    assert e.value.code == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"interrupted during the final evaluation (after step 2 of 2); last checkpoint: {out}"), last
    assert not (out / "summary.json").exists()
    monkeypatch.undo()
    train.main(["--output-dir", str(out), "--resume", "auto"])
    train.main([*args, "--output-dir", str(full)])
    for name in ("evals.jsonl", "samples.jsonl"):
        rows = [[json.loads(line) for line in open(d / name)] for d in (out, full)]
        assert rows[0] == rows[1], name
    assert [r["step"] for r in map(json.loads, open(out / "evals.jsonl"))] == [0, 2]
    summaries = [json.load(open(d / "summary.json")) for d in (out, full)]
    for s in summaries:
        s.pop("wall_time_s")
    assert summaries[0] == summaries[1] and "avg@2_after" in summaries[0]


BUSY = "import torch\ntorch.set_num_threads(1)\nx = torch.randn(256, 256)\nwhile True:\n    x = (x @ x).tanh()\n"


def test_a_seeded_run_is_the_same_beside_busy_processes(trained_model_path, tmp_path):
    """Same machine, same seed, the same run bit for bit, whatever else the machine does: a short DAPO run (dynamic
    sampling's refill rounds would amplify any difference) alone, then beside two processes that keep both cores
    busy. (Across machines the float kernels differ and so can the run: bench/recipes.py reports seeds' spreads.)"""
    args = ["--recipe", "dapo", "--max-steps", "3", "--seed", "7", "--save-every", "0"]
    alone = run(trained_model_path, tmp_path / "alone", *args)
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        beside = run(trained_model_path, tmp_path / "busy", *args)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert strip_perf(alone) == strip_perf(beside)
    import safetensors.torch as st

    a, b = (st.load_file(str(tmp_path / d / "checkpoint-3" / "model.safetensors")) for d in ("alone", "busy"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_progress_in_a_log_file_is_a_line_every_log_every_seconds(monkeypatch, capsys):
    """stderr not a terminal: a line at the start, at most one every runs.LOG_EVERY seconds (set_postfix adds none),
    and one at the end; each shows the count and postfix of the moment it is written."""
    import tqdm.std

    import runs

    clock = [0.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: clock[0])
    steps, step_s = 20, runs.LOG_EVERY / 2  # (halving: exact in floats)
    capsys.readouterr()
    bar = runs.progress_bar(range(steps), total=steps, dynamic_ncols=True)
    for i in bar:
        clock[0] += step_s
        bar.set_postfix(reward=f"{i:.3f}")
    bar.close()
    lines = capsys.readouterr().err.strip().splitlines()
    timed = [n for n in range(1, steps) if n % 2 == 0]  # the counts at each LOG_EVERY s (the last: the end's line)
    assert len(lines) == 1 + len(timed) + 1, lines
    assert lines[0].split("|")[2].strip().startswith(f"0/{steps}")
    for line, n in zip(lines[1:], timed):
        assert f"| {n}/{steps} " in line and f"reward={n - 1:.3f}" in line, (n, line)
    assert f"| {steps}/{steps} " in lines[-1] and f"reward={steps - 1:.3f}" in lines[-1]


def test_resume_auto_before_the_first_checkpoint_of_a_named_model(tmp_path):
    """config.json keeps the folder --model resolved to; `--resume auto` with the name (--model smollm2-135m-instruct,
    as bench/reproduce.py passes it) reads that folder back as the name, so the run restarts rather than being refused
    as another model; with another --model the saved folder stays as it is (resume then refuses the change)."""
    import runs
    from tools import smollm2

    (tmp_path / "config.json").write_text(json.dumps({"model": smollm2.cache_path(), "recipe": "grpo"}))
    assert runs.restart_config(str(tmp_path), [], smollm2.NAME)["model"] == smollm2.NAME
    assert runs.restart_config(str(tmp_path), [], smollm2.cache_path())["model"] == smollm2.cache_path()
    assert runs.restart_config(str(tmp_path), [], "/elsewhere/model")["model"] == smollm2.cache_path()
    given = {"model": smollm2.NAME, "max_steps": 3}
    settings = {"resume": "auto", "output_dir": str(tmp_path), "overwrite": False, "resume_override": False,
                "model": smollm2.NAME, "recipe": "grpo", "max_steps": 3}
    (tmp_path / "config.json").write_text(json.dumps({**settings, "resume": "", "model": smollm2.cache_path()}))
    out = runs.resumed(settings, given, {"model": "fixed", "recipe": "fixed", "max_steps": "free", "output_dir": "free"},
                       lambda: [])
    assert (out["model"], out["overwrite"], out["resume"]) == (smollm2.NAME, True, "")


AVX2_DRIVER = """
import sys
import runs
here = runs.machine()
runs.machine = lambda: {**here, "isa": ["avx2"], "gpu": None}  # an AVX2 CPU, whatever this one is
import tools.cli, train
sys.exit(tools.cli.cli(train.main, sys.argv[1:]))
"""


def test_bf16_on_a_cpu_without_bf16_instructions_says_what_it_costs(tiny_model_path, tmp_path, monkeypatch, capsys):
    """A CPU with neither avx512_bf16 nor AMX (an AVX2 one) has no hardware path for bf16 matmuls: a run under bf16
    flags there says so in one warning line (a fresh process: Accelerate's precision is process-wide); with either
    instruction set, on a GPU, or under float32, nothing."""
    import runs

    here = runs.machine()
    avx512 = ["avx2", "avx512f", "avx512_bf16"]
    for isa, gpu, said in ((["avx2"], None, True), (avx512, None, False), (avx512 + ["amx_bf16"], None, False),
                           (["avx2"], "NVIDIA H200", False)):
        monkeypatch.setattr(runs, "machine", lambda: {**here, "isa": isa, "gpu": gpu})
        assert bool(runs.bf16_warning("--dtype bf16-mixed")) == said, (isa, gpu)
    r = subprocess.run([sys.executable, "-c", AVX2_DRIVER, "--model", tiny_model_path, "--output-dir",
                        str(tmp_path / "a"), *SMALL, "--max-steps", "1", "--dtype", "bf16-mixed", "--rollout-dtype",
                        "bfloat16"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    warned = [line for line in r.stderr.splitlines() if "no bf16 instructions" in line]
    assert r.returncode == 0 and len(warned) == 1, r.stderr[-3000:]
    assert warned[0].startswith("warning: --dtype bf16-mixed --rollout-dtype bfloat16 on a CPU with no bf16 "
                                "instructions") and "docs/smollm2.md" in warned[0]
    monkeypatch.setattr(runs, "machine", lambda: {**here, "isa": ["avx2"], "gpu": None})  # the same CPU, float32
    code, err = cli(["--model", tiny_model_path, "--output-dir", str(tmp_path / "b"), *SMALL, "--max-steps", "1"],
                    capsys)
    assert code == 0 and "bf16" not in err, err
