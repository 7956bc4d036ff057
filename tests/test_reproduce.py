"""bench/reproduce.py: every experiment's flags are valid train.py flags, the claim checks on hand-made numbers, and
one paper end to end at 2 steps (the reproductions themselves are benchmarks, not tests).

Run:  python -m pytest -q tests/test_reproduce.py
"""
import json
import os
import re
import subprocess
import sys

import pytest

# appended, after the project: bench/async_rollout.py must not shadow the project's async_rollout.py
sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import config  # noqa: E402
import reproduce  # noqa: E402
from trainer import stages  # noqa: E402


@pytest.mark.parametrize("paper", list(reproduce.PAPERS))
def test_every_variant_is_a_valid_run(paper):
    for e in reproduce.PAPERS[paper]():
        assert e.variants and e.table and e.plots
        for v in e.variants:
            for smoke in (False, True):
                cfg = config.parse_config(reproduce.train_argv(e, v, 0, "/tmp/x", smoke))
                planned = stages.parse_stages(cfg)
                assert planned[-1].end == cfg.max_steps
                if smoke:
                    assert cfg.max_steps == 2


@pytest.mark.parametrize("paper", reproduce.COUNTDOWN_PAPERS)
def test_every_countdown_variant_is_a_valid_countdown_run(paper):
    """--task countdown: each variant trains on builtin-countdown with the Countdown defaults (reward, 128 tokens, lr
    3e-4) and its paper's own changes; the math form of the same experiment differs only where it says."""
    for e, m in zip(reproduce.PAPERS[paper]("countdown"), reproduce.PAPERS[paper]()):
        assert len(e.variants) == len(m.variants) and e.name == m.name
        for v, w in zip(e.variants, m.variants):  # the same variants, in order (a budget in a name may be scaled)
            cfg = config.parse_config(reproduce.train_argv(e, v, 0, "/tmp/x", False))
            # compass: levels 1-2 (its curriculum needs a harder level); CISPO's own lr is the math form's x 3
            data = "builtin-countdown:1,2" if paper == "compass" else "builtin-countdown"
            lr = 7.5e-5 if "lr 7.5e-5" in v else 3e-4
            assert (cfg.train_data, cfg.reward, cfg.max_new_tokens, cfg.lr, cfg.batch_size) == (
                data, "countdown", 128, lr, 128)
            math = config.parse_config(reproduce.train_argv(m, w, 0, "/tmp/x", False))
            assert (cfg.clip_high, cfg.loss_agg, cfg.dynamic_sampling, cfg.overlong_filter, cfg.mini_batch_size) == (
                math.clip_high, math.loss_agg, math.dynamic_sampling, math.overlong_filter, math.mini_batch_size)
            assert (cfg.algorithm, cfg.entropy_coef, cfg.adaptive_entropy, cfg.kl_coef) == (
                math.algorithm, math.entropy_coef, math.adaptive_entropy, math.kl_coef)


def test_a_task_a_paper_has_no_form_for_is_one_error():
    assert set(reproduce.COUNTDOWN_PAPERS) | set(reproduce.NO_COUNTDOWN) == set(reproduce.PAPERS)
    for paper in reproduce.NO_COUNTDOWN:
        with pytest.raises(SystemExit, match=f"error: --task countdown: {paper} has no Countdown form: its claim is about"):
            reproduce.main([paper, "--task", "countdown", "--smoke"])
    assert set(reproduce.SMOLLM2_PAPERS) | set(reproduce.NO_SMOLLM2) == set(reproduce.PAPERS)
    for paper in reproduce.NO_SMOLLM2:
        with pytest.raises(SystemExit, match=f"error: --task smollm2: {paper} has no SmolLM2 form: its claim is about"):
            reproduce.main([paper, "--task", "smollm2", "--smoke"])
    for paper in set(reproduce.PAPERS) - set(reproduce.SHORT_PAPERS):  # the tasks for DAPO's overlong row alone
        with pytest.raises(SystemExit, match=f"error: --task smollm2-short: {paper} has no form at 16 tokens: "):
            reproduce.main([paper, "--task", "smollm2-short", "--smoke"])
        with pytest.raises(SystemExit, match=f"error: --task smollm2-worked: {paper} has no form with the working "
                                             "asked for: "):
            reproduce.main([paper, "--task", "smollm2-worked", "--smoke"])


def test_smollm2_runs_on_a_cpu_without_bf16_instructions_are_announced(monkeypatch, capsys):
    """--task smollm2's runs are bf16: on a CPU with no bf16 instructions (AVX2) the command says first, in one warning
    line, that they take hours there; with avx512_bf16, or only re-rendering a report (--report-only), nothing."""
    import runs

    here = runs.machine()

    def stop(*a, **k):
        raise SystemExit("stopped before any run")

    monkeypatch.setattr(reproduce, "run_paper", stop)
    for isa, argv, said in ((["avx2"], [], True), (["avx2", "avx512f", "avx512_bf16"], [], False),
                            (["avx2"], ["--report-only"], False)):
        monkeypatch.setattr(runs, "machine", lambda: {**here, "isa": isa, "gpu": None})
        capsys.readouterr()
        with pytest.raises(SystemExit, match="stopped before any run"):
            reproduce.main(["dapo", "--task", "smollm2", *argv])
        err = capsys.readouterr().err
        assert err.count("\n") == int(said) and ("no bf16 instructions" in err) == said, (isa, argv, err)
        assert not said or ("takes hours here" in err and err.startswith("warning: --task smollm2's bf16 flags"))


def test_bad_input_is_one_line_and_exit_2():
    for argv in (["mimo-code", "--task", "smollm2"], ["dapo", "--seeds", "0,x"]):
        p = subprocess.run([sys.executable, os.path.join(reproduce.ROOT, "bench", "reproduce.py"), *argv],
                           capture_output=True, text=True)
        assert (p.returncode, p.stdout, p.stderr.count("\n")) == (2, "", 1) and p.stderr.startswith("error: "), p.stderr


def run(metrics, summary=None):
    return reproduce.Run("x", [{"step": i + 1, **m} for i, m in enumerate(metrics)], [], summary or {"after": {}})


def test_compare_and_verdict_by_hand():
    e = reproduce.Experiment("e", "", [], {"a": [], "b": []}, None, [], [])
    e.runs = {"a": [run([{"k": 1.0}, {"k": 3.0}]), run([{"k": 2.0}, {"k": 2.0}]), run([{"k": 0.0}, {"k": 1.0}])],
              "b": [run([{"k": 1.0}, {"k": 1.0}]), run([{"k": 1.0}, {"k": 1.0}]), run([{"k": 1.0}, {"k": 1.0}])]}
    mean = reproduce.over_run("k")  # a: 2, 2, 0.5 (mean 1.5, sd 0.866); b: 1, 1, 1 (sd 0)
    holds, wins, n, ma, mb = reproduce.compare(e, "a", "b", mean)
    assert (holds, wins, n, ma, mb) == (False, 2, 3, 1.5, 1.0)  # ahead by 0.5, within a's spread: no difference
    e.runs["c"] = [run([{"k": 3.0}]), run([{"k": 3.0}]), run([{"k": 3.3}])]  # mean 3.1, sd 0.173: clear of b
    assert reproduce.compare(e, "c", "b", mean)[:3] == (True, 3, 3)
    assert reproduce.verdict_of([(True, 2, 3, 1.5, 1.0)]) == "partly"  # in the mean, not in every seed
    assert reproduce.verdict_of([(True, 3, 3, 0, 0), (True, 3, 3, 0, 0)]) == "reproduces"
    assert reproduce.verdict_of([(False, 1, 3, 0, 0)]) == "does not"
    assert reproduce.compare(e, "a", "b", mean, higher=False)[:3] == (False, 1, 3)
    assert reproduce.cv("k")(e.runs["a"][0]) == pytest.approx(2 ** 0.5 / 2)  # sd(1, 3) / mean(1, 3)
    assert reproduce.mean_sd([1.0, 2.0, 3.0]) == "2 ± 1"
    never = lambda r: float("nan") if r.metrics[0]["k"] == 1.0 else 10  # noqa: E731 (first_step_at's "never")
    assert reproduce.compare(e, "c", "b", never, higher=False)[:3] == (False, 0, 3)  # b never: no difference, no crash


def test_a_report_says_which_runs_ran_on_which_machine_where_they_span_more_than_one(tmp_path):
    amx = {"cpu": "Intel(R) Xeon(R) Processor", "isa": ["avx512f", "avx512_bf16", "amx_bf16"], "kernels": "AVX512",
           "gpu": None}
    no_amx = {**amx, "isa": ["avx512f", "avx512_bf16"]}
    amd = {**no_amx, "cpu": "AMD EPYC"}  # the same instructions as no_amx: the make alone tells them apart

    def ran(variant, seed, m, acc0):
        d = tmp_path / f"{variant}{seed}{m.get('cpu')}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"seed": seed, "machine": m}))
        return reproduce.Run(str(d), [], [{"step": 0, "eval/accuracy": acc0}, {"step": 10, "eval/accuracy": 0.5}], {})

    e = reproduce.Experiment("e", "", [], {"a": [], "b": []}, None, [], [])
    e.runs = {"a": [ran("a", 0, amx, 0.109375), ran("a", 1, amx, 0.109375)],
              "b": [ran("b", 0, amx, 0.109375), ran("b", 1, amx, 0.109375)]}
    assert reproduce.machines_line(e) == ""  # one machine: nothing to say
    e.runs["a"].append(ran("a", 2, no_amx, 0.125))
    e.runs["b"].append(ran("b", 2, no_amx, 0.125))
    assert reproduce.machines_line(e).endswith(
        "seeds 0, 1 on an Intel(R) Xeon(R) Processor with AMX (AVX512 kernels): 0.109; "
        "seed 2 on an Intel(R) Xeon(R) Processor with avx512_bf16 without AMX (AVX512 kernels): 0.125.")
    e.runs["b"][2] = ran("b", 2, amd, 0.109375)
    assert reproduce.machines_line(e).endswith(
        "seeds 0, 1 on an Intel(R) Xeon(R) Processor with AMX (AVX512 kernels): 0.109; "
        "'a' seed 2 on an Intel(R) Xeon(R) Processor with avx512_bf16 without AMX (AVX512 kernels): 0.125; "
        "'b' seed 2 on an AMD EPYC with avx512_bf16 without AMX (AVX512 kernels): 0.109.")
    e.runs = {"a": e.runs["a"][:2], "b": [ran("b", 3, {**amx, "gpu": "NVIDIA H200"}, 0.2), e.runs["b"][1]]}
    assert reproduce.machines_line(e).endswith(  # a seed whose variants ran apart is named by variant
        "seed 1, 'a' seed 0 on an Intel(R) Xeon(R) Processor with AMX (AVX512 kernels): 0.109; "
        "'b' seed 3 on NVIDIA H200: 0.2.")
    assert reproduce.kind_of({"isa": ["avx2"], "kernels": "AVX2"}) == "a CPU with no bf16 instructions (AVX2 kernels)"


def test_one_paper_end_to_end_at_two_steps(tmp_path):
    """compass --smoke: both variants run 2 steps through train.py, the report and its check are computed, nothing
    goes to docs/; a second call reuses the finished runs."""
    docs = os.path.join(reproduce.ROOT, "docs", "reproduce_compass.md")
    before = os.path.getmtime(docs) if os.path.exists(docs) else None
    out = reproduce.main(["compass", "--smoke", "--out", str(tmp_path)])
    (name, verdict), = out["compass"]
    assert verdict in ("reproduces", "partly", "does not")
    runs = list((tmp_path / "compass").glob("*/*/seed0"))
    assert len(runs) == 2
    for r in runs:
        assert len([json.loads(x) for x in open(r / "metrics.jsonl")]) == 2
        assert json.load(open(r / "run.json"))["wall_s"] > 0
    assert (os.path.getmtime(docs) if os.path.exists(docs) else None) == before
    stamp = [os.path.getmtime(r / "summary.json") for r in runs]
    reproduce.main(["compass", "--smoke", "--out", str(tmp_path)])
    assert [os.path.getmtime(r / "summary.json") for r in runs] == stamp
    os.remove(runs[0] / "summary.json")  # an interrupted run (its config.json stays) starts again; the other is reused
    reproduce.main(["compass", "--smoke", "--out", str(tmp_path)])
    assert os.path.getmtime(runs[0] / "summary.json") > stamp[0] and os.path.getmtime(runs[1] / "summary.json") == stamp[1]


def test_offpolicy_losses_check_by_hand():
    """offpolicy-losses' declared check on hand-made runs: CISPO and GSPO ahead of DAPO in every seed by more than the
    spread, GSPO clipping more tokens -> reproduces; GSPO behind -> partly. Its table reads every variant's metrics."""
    exps = reproduce.PAPERS["offpolicy-losses"]()
    assert [e.base.count("--rollout-lag") for e in exps] == [0, 1] and all(len(e.variants) == 4 for e in exps)
    assert [e.base.count("--rollout-lag") for e in reproduce.PAPERS["offpolicy-losses"]("countdown")] == [0]
    sm = reproduce.PAPERS["offpolicy-losses"]("smollm2")  # the three losses, synchronous, at mu 16 of 8 x 8 responses
    assert [e.base.count("--rollout-lag") for e in sm] == [0] and len(sm[0].variants) == 3
    cfg = config.parse_config(reproduce.train_argv(sm[0], next(iter(sm[0].variants)), 0, "/tmp/x", False))
    assert cfg.epochs * cfg.batch_size // cfg.mini_batch_size == 16
    cfg = config.parse_config(reproduce.train_argv(exps[1], next(iter(exps[1].variants)), 0, "/tmp/x", False))
    assert cfg.epochs * cfg.batch_size // cfg.mini_batch_size == 16 and cfg.rollout_lag == 1
    dapo_, gspo_, cispo_, cispo_lr = exps[0].variants
    assert exps[0].variants[cispo_lr] == exps[0].variants[cispo_] + ["--lr", "2.5e-5"]  # the cispo recipe's lr

    def runs(acc, clip, extra=None):
        return [run([{"policy/clip_frac_low": 0.0, "policy/clip_frac_high": clip, "policy/entropy": 0.1,
                      "perf/grad_norm": g, **(extra or {})} for g in (1.0, 1.0, 5.0)], {"after": {"eval/accuracy": a}})
                for a in acc]

    e = exps[0]
    e.runs = {dapo_: runs([0.50, 0.51, 0.52], 0.01), gspo_: runs([0.60, 0.61, 0.62], 0.3, {"policy/seq_clip_frac_high": 0.2}),
              cispo_: runs([0.70, 0.71, 0.72], 0.01, {"policy/capped_frac_high": 0.02}),
              cispo_lr: runs([0.30, 0.31, 0.32], 0.01, {"policy/capped_frac_high": 0.02})}
    verdict, lines = e.check(e, e.runs)
    assert verdict == "reproduces" and len(lines) == 6  # the lr 2.5e-5 row is outside the verdict: behind, still reproduces
    vals = [fn(e.runs[gspo_][0]) for _, fn in e.table]
    assert vals[:4] + vals[5:] == pytest.approx([0.60, 0.1, 0.3, 0.2, 1.0, 5.0]) and vals[4] != vals[4]  # capped: nan
    assert e.table[5][1](e.runs[dapo_][0]) == 1.0  # one step of three above 3x the median grad norm
    e.runs[gspo_] = runs([0.40, 0.41, 0.42], 0.3)
    assert e.check(e, e.runs)[0] == "partly"

    # SmolLM2: a step whose groups all have one outcome has advantages 0, so no clip binds; the report adds the
    # clipped share over the steps with a gradient (not in the verdict) and counts those steps
    s = sm[0]
    def steps(*zc):  # (share of one-outcome groups, share clipped high) per step, the same in 3 seeds
        return [run([{"rollout/frac_zero_std": z, "policy/clip_frac_low": 0.0, "policy/clip_frac_high": c,
                      "policy/entropy": 0.1, "perf/grad_norm": 1.0} for z, c in zc], {"after": {"eval/accuracy": 0.5}})
                for _ in range(3)]
    s.runs = {dapo_: steps((0.5, 0.05), (0.5, 0.05), (1.0, 0.0)), gspo_: steps((0.5, 0.3), (1.0, 0.0), (1.0, 0.0)),
              cispo_: steps((0.5, 0.0), (0.5, 0.0), (0.5, 0.0))}
    verdict, lines = s.check(s, s.runs)
    assert lines[2].startswith("share of tokens clipped, GSPO vs DAPO") and ": 0.1 vs 0.0333 (" in lines[2]
    assert lines[-1] == ("share of tokens clipped over the steps with a gradient, GSPO vs DAPO (not in the verdict): "
                         "0.3 vs 0.05 (beyond the seeds' spread: yes; the claimed way in 3/3 seeds)")
    count = dict(s.table)["steps with a gradient"]
    assert [count(s.runs[v][0]) for v in (dapo_, gspo_, cispo_)] == [2.0, 1.0, 3.0]


def test_readme_verdict_table_is_the_reports():
    """The README's table of verdicts, math, Countdown and SmolLM2 side by side, says what each committed report
    computed (a paper of two experiments: both verdicts, 'a / b', where they differ); 'no form' exactly where --task
    countdown or --task smollm2 has none; 'not run yet' where a SmolLM2 form has no committed report; the easy task's
    GPU verdict where given."""
    readme = open(os.path.join(reproduce.ROOT, "README.md")).read()
    rows = [r.split("|")[1:-1] for r in readme.splitlines() if r.startswith("| ") and r.count("`") == 2 and " | `" in r]
    seen = set()
    def verdicts(name):
        path = os.path.join(reproduce.ROOT, "docs", f"reproduce_{name}.md")
        return " / ".join(dict.fromkeys(line.split("**Verdict: ")[1].split(".**")[0] for line in open(path)
                                        if line.startswith("**Verdict")))

    for claim, paper, math, countdown, smollm2 in rows:
        paper = paper.strip().strip("`")
        seen.add(paper)
        for cell, name in ((math, paper), (countdown, reproduce.report_name(paper, "countdown")),
                           (smollm2, reproduce.report_name(paper, "smollm2"))):
            said = cell.replace("**", "").split(" (")[0].strip()
            path = os.path.join(reproduce.ROOT, "docs", f"reproduce_{name}.md")
            if said == "no form":
                assert (name.endswith("_countdown") and paper in reproduce.NO_COUNTDOWN or name.endswith("_smollm2")
                        and paper not in reproduce.SMOLLM2_PAPERS) and not os.path.exists(path), (paper, name)
                continue
            if said == "not run yet":
                assert name.endswith("_smollm2") and not os.path.exists(path), (paper, "a report exists")
                assert paper in reproduce.SMOLLM2_PAPERS, (paper, "has no SmolLM2 form")
            else:
                assert said == verdicts(name), (paper, name, said)
            if "easy task, H200: " in cell:  # the first SmolLM2 form's 10x runs on a GPU
                assert cell.split("easy task, H200: ")[1].split(")")[0] == verdicts(
                    reproduce.report_name(paper, "smollm2-easy", 10)), paper
            if "16 tokens: " in cell:  # --task smollm2-short: DAPO's rows at half the length limit
                assert cell.split("16 tokens: ")[1].split(";")[0].split(")")[0] == verdicts(
                    reproduce.report_name(paper, "smollm2-short")), paper
            if "the working asked for: " in cell:  # --task smollm2-worked: DAPO's overlong row where answers are long
                assert re.match(r"[a-z ]+[a-z]", cell.split("the working asked for: ")[1]).group() == verdicts(
                    reproduce.report_name(paper, "smollm2-worked")), paper
    assert seen == set(reproduce.PAPERS)


@pytest.mark.parametrize("task", ["math", "countdown"])
def test_committed_reports_are_the_codes_experiments(task):
    """Every committed report names the claim, the settings and the note its experiments now have: a flag or a note
    changed in bench/reproduce.py without rerunning the command leaves a report that no longer says what ran."""
    for paper in reproduce.PAPERS:
        if task == "countdown" and paper in reproduce.NO_COUNTDOWN:
            continue
        text = open(os.path.join(reproduce.ROOT, "docs", f"reproduce_{reproduce.report_name(paper, task)}.md")).read()
        for e in reproduce.experiments(paper, task):
            settings = "python train.py " + reproduce.shell(e.base)
            assert all(part in text for part in (e.name, e.claim, e.note, settings)), (paper, e.name)


@pytest.mark.parametrize("paper,task", [(p, t) for t in ("smollm2", "smollm2-easy", "smollm2-short", "smollm2-worked")
                                        for p in (reproduce.SHORT_PAPERS if t in reproduce.NO_SHORT else reproduce.SMOLLM2_PAPERS)])
def test_every_smollm2_variant_is_a_valid_run(paper, task):
    """--task smollm2 / smollm2-easy / smollm2-short / smollm2-worked: every variant trains SmolLM2-135M-Instruct on
    chain_sum (two two-digit / two one-digit / two two-digit / two two-digit terms, the working asked for) at 32 / 32 /
    16 / 32 tokens with the README run's settings and its paper's changes; --scale K multiplies the steps; a run a time
    limit will stop checkpoints only at its end."""
    tokens = 16 if task == "smollm2-short" else 32
    for e in reproduce.experiments(paper, task):
        for v in e.variants:
            cfg = config.parse_config(reproduce.train_argv(e, v, 0, "/tmp/x", False, 10, 2, checkpoints=False))
            assert cfg.model == "smollm2-135m-instruct" and cfg.reward == "rg"
            assert (cfg.max_new_tokens, cfg.batch_size, cfg.group_size, cfg.lr, cfg.dtype) == (tokens, 64, 8, 1e-5,
                                                                                                  "bf16-mixed")
            steps = int(e.base[e.base.index("--max-steps") + 1])  # 30 (MiMo's: 12 and 24)
            assert (cfg.max_steps, cfg.threads, cfg.save_every) == (10 * steps, 2, 0)
            if cfg.train_data == reproduce.SMOLLM2_LEVELS:  # the level mix (compass, MiMo's easy pool): the task's own
                assert paper in ("compass", "mimo") and cfg.eval_problems == 48 and cfg.eval_every == 10
            else:
                assert f"max_digits={1 if task == 'smollm2-easy' else 2}&" in cfg.train_data
                assert cfg.train_data.endswith("&format=" + ("worked" if task == "smollm2-worked" else "final-answer"))
                assert cfg.eval_problems == (24 if task == "smollm2-easy" else 64)
                assert cfg.eval_every == (0 if e.name.startswith("MiMo Sec. 3.4.1") else 10)  # rollout seconds only
    dapo_ = reproduce.experiments("dapo", task)[0]
    full = config.parse_config(reproduce.train_argv(dapo_, list(dapo_.variants)[-1], 0, "/tmp/x", False))
    if task == "smollm2-worked":  # the overlong row alone: + clip-higher, + the soft punishment
        hi = config.parse_config(reproduce.train_argv(dapo_, "+ clip-higher", 0, "/tmp/x", False))
        assert list(dapo_.variants) == ["+ clip-higher", "+ soft overlong punishment"]
        assert (hi.clip_high, hi.overlong_buffer, full.clip_high, full.overlong_buffer, full.wrong_reward) == (
            0.28, 0, 0.28, 8, -1)
        return
    grpo_ = config.parse_config(reproduce.train_argv(dapo_, "GRPO", 0, "/tmp/x", False))
    assert (full.clip_high, full.overlong_buffer, full.loss_agg, full.dynamic_sampling, full.overlong_filter) == ((
        0.28, 4, "seq-mean-token-mean", False, False) if task == "smollm2-short" else (0.28, 8, "token-mean", True, False))
    assert (grpo_.clip_high, grpo_.overlong_buffer, grpo_.dynamic_sampling, grpo_.wrong_reward) == (0.2, 0, False, -1)


def seeds_at(acc):
    """One run per seed, its held-out greedy accuracy `a` at steps 10 and 20, the same rollout metrics in each."""
    return [reproduce.Run("x", [{"step": 1, "rollout/truncated_frac": 0.1, "rollout/frac_zero_std": 0.5,
                                 "policy/entropy": 1.0, "rollout/accuracy": 0.2}],
                          [{"step": 0, "eval/accuracy": 0.1}, {"step": 10, "eval/accuracy": a},
                           {"step": 20, "eval/accuracy": a}], {"after": {}}) for a in acc]


def test_the_16_token_form_needs_both_rows_by_hand():
    """--task smollm2-short's declared check: clip-higher ahead of GRPO and the soft overlong punishment ahead of
    clip-higher, each in every seed beyond the spread -> reproduces; the overlong row level -> partly; neither -> does
    not. Its runs go to docs/smollm2_runs/reproduce-short/."""
    (e,) = reproduce.experiments("dapo", "smollm2-short")
    grpo_, hi_, ol_ = e.variants
    assert e.variants[ol_] == e.variants[hi_] + ["--overlong-buffer", "4"] and e.variants[hi_] == ["--clip-high", "0.28"]
    assert reproduce.task_root(None, "smollm2-short") == reproduce.SMOLLM2_RUNS + "-short"

    e.runs = {grpo_: seeds_at([0.10, 0.11, 0.12]), hi_: seeds_at([0.20, 0.21, 0.22]), ol_: seeds_at([0.30, 0.31, 0.32])}
    verdict, lines = e.check(e, e.runs)
    assert verdict == "reproduces" and len(lines) == 5 and lines[1].startswith("the overlong row")
    assert lines[1].endswith("0.31 vs 0.21 (beyond the seeds' spread: yes; the claimed way in 3/3 seeds)")
    e.runs[ol_] = seeds_at([0.20, 0.22, 0.21])
    assert e.check(e, e.runs)[0] == "partly"
    e.runs[hi_] = seeds_at([0.12, 0.10, 0.11])
    e.runs[ol_] = seeds_at([0.11, 0.12, 0.10])
    assert e.check(e, e.runs)[0] == "does not"


def test_the_worked_form_reads_the_overlong_row_by_hand():
    """--task smollm2-worked's declared check: the soft overlong punishment ahead of clip-higher alone, in every seed
    beyond the spread -> reproduces; ahead in the mean beyond the spread but not in every seed -> partly; level -> does
    not. Its runs go to docs/smollm2_runs/reproduce-worked/."""
    (e,) = reproduce.experiments("dapo", "smollm2-worked")
    hi_, ol_ = e.variants
    assert reproduce.task_root(None, "smollm2-worked") == reproduce.SMOLLM2_RUNS + "-worked"

    e.runs = {hi_: seeds_at([0.20, 0.21, 0.22]), ol_: seeds_at([0.30, 0.31, 0.32])}
    verdict, lines = e.check(e, e.runs)
    assert verdict == "reproduces" and len(lines) == 4 and lines[0].startswith("the overlong row")
    assert lines[0].endswith("0.31 vs 0.21 (beyond the seeds' spread: yes; the claimed way in 3/3 seeds)")
    e.runs[ol_] = seeds_at([0.60, 0.62, 0.19])
    assert e.check(e, e.runs)[0] == "partly"
    e.runs[ol_] = seeds_at([0.21, 0.22, 0.20])
    assert e.check(e, e.runs)[0] == "does not"


def fake_run(root, name, evals, metrics, summary=True, error=None):
    """A run directory as train.py and run_one leave it: evals {step: accuracy}, metrics {step: entropy}."""
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "evals.jsonl"), "w") as f:
        f.writelines(json.dumps({"step": s, "eval/accuracy": a}) + "\n" for s, a in evals.items())
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps({"step": s, "policy/entropy": h}) + "\n" for s, h in metrics.items())
    if summary:
        json.dump({"before": {"step": 0}, "after": {"step": max(evals)}}, open(os.path.join(d, "summary.json"), "w"))
    with open(os.path.join(d, "train.log"), "w") as f:
        f.write("step 1\n" + (f"{error}\n" if error else ""))
    return d


def test_runs_that_ended_early_are_compared_where_both_reached(tmp_path):
    """A run that ended early (an error, a time limit) is read up to a step; each check compares its two variants at
    the last evaluation both reached, so the longer run's later steps do not count against the shorter one."""
    short = fake_run(tmp_path, "a", {0: 0.1, 10: 0.4, 20: 0.5}, {s: 1.0 / s for s in range(1, 22)}, summary=False,
                     error="error: step 21: dynamic sampling: only 6/8 groups with mixed correctness")
    long_ = fake_run(tmp_path, "b", {0: 0.1, 10: 0.3, 20: 0.3, 30: 0.9}, {s: 2.0 for s in range(1, 31)})
    assert reproduce.why_ended(short).startswith("error: step 21: dynamic sampling")
    assert reproduce.why_ended(long_) == "step 1"  # no error line, no time limit: the output's last line
    json.dump({"argv": [], "stopped": True}, open(os.path.join(long_, "run.json"), "w"))
    assert reproduce.why_ended(long_) == "stopped at the time limit"
    assert (reproduce.last_eval_step(short), reproduce.last_eval_step(long_)) == (20, 30)
    r = reproduce.load_run(short, upto=10)
    assert [m["step"] for m in r.metrics] == list(range(1, 11)) and r.summary["after"] == {"step": 10, "eval/accuracy": 0.4}
    e = reproduce.Experiment("x", "", [], {"a": [], "b": []}, None, [], [])
    e.runs = {"a": [reproduce.load_run(short, 20)], "b": [reproduce.load_run(long_)]}
    e.early = True
    assert reproduce.pair_step(e, "a", "b") == 20 and reproduce.at(e, "a", "b") == " at step 20"
    # held-out accuracy of the last two evaluations: a (0.4 + 0.5) / 2 against b's at steps 10 and 20, not 20 and 30
    assert reproduce.compare(e, "a", "b", reproduce.held_out()) == (True, 1, 1, pytest.approx(0.45), pytest.approx(0.3))
    assert reproduce.compare(e, "a", "b", reproduce.last("policy/entropy", 5))[3:] == (
        pytest.approx(sum(1.0 / s for s in range(16, 21)) / 5), 2.0)
    e.early = False  # every run finished: read as loaded, no step named
    assert reproduce.pair_step(e, "a", "b") is None and reproduce.at(e, "a", "b") == ""


def test_a_time_limit_stops_the_runs_and_says_when_nothing_can_be_compared(tmp_path):
    """--stop-after: runs still going are stopped as Ctrl-C stops them (also where the command was started in the
    background with SIGINT ignored) and marked stopped; stopped before any evaluation, the report is one error line."""
    with pytest.raises(SystemExit, match="error: \\[compass\\] a run ended before its first evaluation after step 0 "
                                         "\\(stopped at the time limit\\)"):
        reproduce.main(["compass", "--smoke", "--out", str(tmp_path), "--stop-after", "0.05"])
    metas = [json.load(open(os.path.join(d, "run.json"))) for d, _, files in os.walk(tmp_path) if "run.json" in files]
    assert len(metas) == 2 and all(m["stopped"] and "--save-every" in m["argv"] for m in metas)


SMOLLM2_REPORTS = [(paper, task, scale) for paper in reproduce.SMOLLM2_PAPERS
                   for task, scale in (("smollm2", 1), ("smollm2-easy", 10), ("smollm2-short", 1), ("smollm2-worked", 1))
                   if os.path.exists(os.path.join(reproduce.ROOT, "docs",
                                                  f"reproduce_{reproduce.report_name(paper, task, scale)}.md"))]


def test_the_gpu_runs_of_the_first_smollm2_form_are_committed():
    assert {("dapo", "smollm2-easy", 10), ("entropy", "smollm2-easy", 10)} <= set(SMOLLM2_REPORTS)


@pytest.mark.parametrize("paper,task,scale", SMOLLM2_REPORTS)
def test_committed_smollm2_reports_are_what_the_code_computes_from_the_committed_runs(paper, task, scale):
    """Every committed SmolLM2 report (docs/reproduce_PAPER_smollm2*.md) holds the verdict and check lines that
    bench/reproduce.py computes now from the runs committed beside it (docs/smollm2_runs/), and its settings."""
    text = open(os.path.join(reproduce.ROOT, "docs", f"reproduce_{reproduce.report_name(paper, task, scale)}.md")).read()
    seeds = [int(s) for s in re.search(r"; seeds ((?:\d+, )*\d+)", text).group(1).split(", ")]
    exps, _ = reproduce.run_paper(paper, seeds, 1, None, False, task, scale, train=False)
    for e in exps:
        verdict, lines = e.check(e, e.runs)
        assert f"**Verdict: {verdict}.**" in text and all(f"- {x}" in text for x in lines), (paper, task, lines)
        assert "python train.py " + reproduce.shell(e.base) in text and e.note in text
        assert reproduce.machines_line(e) in text  # which seeds ran on which machine, where they span more than one


def test_a_report_with_fewer_than_3_seeds_says_what_a_seed_costs():
    """The default is 3 seeds; a report of fewer says why: this command's minutes per seed, and so what 3 would take."""
    wall = (2 * 50 * 60.0, 2.0, 1, {}, "a CPU", [])  # two seeds' runs, 100 min in all over 1 worker
    assert reproduce.fewer_seeds([0, 1], wall) == " (2, not 3, for the cost: a seed's runs take ~50 min here, 3 seeds ~150)"
    assert reproduce.fewer_seeds([0, 1, 2], wall) == ""


def test_a_shared_variant_is_one_run_and_must_have_its_flags(monkeypatch, tmp_path):
    """A variant an experiment shares with another (Experiment.shared) is one directory, read by both, its cost counted
    once; shared under other flags it is an error, before anything runs (else one would overwrite the other's run)."""
    def exp(name, lr, shared=None):
        return reproduce.Experiment(name, "c", ["--lr", lr], {"a": []}, None, [], [], shared=shared or {})
    out = tmp_path / "p" / "one" / "a" / "seed0"
    out.mkdir(parents=True)
    for f, x in (("run.json", {"argv": [], "wall_s": 60.0}), ("summary.json", {}), ("metrics.jsonl", None),
                 ("evals.jsonl", None)):
        (out / f).write_text(json.dumps(x) if x is not None else "")
    monkeypatch.setitem(reproduce.PAPERS, "p", lambda: [exp("one", "1e-5"), exp("two", "1e-5", {"a": "one"})])
    exps, wall = reproduce.run_paper("p", [0], 1, str(tmp_path), False, train=False)
    assert [r.dir for e in exps for r in e.runs["a"]] == [str(out)] * 2 and wall[0] == 60.0
    monkeypatch.setitem(reproduce.PAPERS, "p", lambda: [exp("one", "1e-5"), exp("two", "3e-5", {"a": "one"})])
    with pytest.raises(SystemExit, match="shares 'a' with one, but its flags differ"):
        reproduce.run_paper("p", [0], 1, str(tmp_path), False, train=False)


def test_how_a_run_is_carried_out_does_not_make_it_another_run():
    """--threads and --save-every change how a run is carried out, not what it computes: a resumed command with another
    --workers (so another --threads) or under --stop-after (--save-every 0) keeps the runs it finds."""
    a = ["--lr", "1e-5", "--threads", "2", "--seed", "0"]
    assert reproduce.what(a) == reproduce.what(["--lr", "1e-5", "--seed", "0", "--threads", "1", "--save-every", "0"])
    assert reproduce.what(a) != reproduce.what(["--lr", "2e-5", "--threads", "2", "--seed", "0"])
    assert reproduce.what(["--save-every", "10", "--seed", "1"]) == ["--seed", "1"]


def test_a_killed_sitting_still_counts_in_the_resumed_runs_time(tmp_path, monkeypatch):
    """run_one records run.json each minute while train.py runs: a sitting killed after two and a half minutes (the
    machine gone, no chance to write at the end) leaves 120 s, and the sitting that resumes and finishes adds its own
    30 s to them. train.py and the clock are stand-ins; run_one's loop and run.json are the real ones."""
    clock = [1000.0]
    monkeypatch.setattr(reproduce, "time", type("Clock", (), {"time": staticmethod(lambda: clock[0])}))
    out = str(tmp_path / "run")
    argv = ["--max-steps", "30", "--seed", "2", "--output-dir", out]

    class Gone(Exception):
        pass

    class Killed:  # the first sitting: runs on until the third minute, when the machine goes away
        def __init__(self, *a, **kw):
            self.waits = 0

        def wait(self, timeout=None):
            self.waits += 1
            clock[0] += timeout if self.waits < 3 else timeout / 2
            if self.waits == 3:
                raise Gone
            raise subprocess.TimeoutExpired("train.py", timeout)

    class Finishes:  # the second: resumed (--resume auto), done in 30 s
        def __init__(self, cmd, **kw):
            assert cmd[-2:] == ["--resume", "auto"]

        def wait(self, timeout=None):
            clock[0] += 30
            open(os.path.join(out, "summary.json"), "w").write("{}")
            return 0

    monkeypatch.setattr(reproduce.subprocess, "Popen", Killed)
    with pytest.raises(Gone):
        reproduce.run_one(argv, out, resume=True)
    assert json.load(open(os.path.join(out, "run.json")))["wall_s"] == 120
    monkeypatch.setattr(reproduce.subprocess, "Popen", Finishes)
    assert reproduce.run_one(argv, out, resume=True) == 150
    assert json.load(open(os.path.join(out, "run.json")))["wall_s"] == 150
    assert not os.path.exists(os.path.join(out, "run.json.tmp"))


def test_a_run_whose_dynamic_sampling_ran_dry_is_kept_as_it_ended(tmp_path):
    """train.py ends a run whose dynamic sampling finds too few mixed groups in --max-gen-rounds rounds (one error
    line): run_one keeps it as it ended (None: compared where it stopped, its checkpoints gone), reuses it rather than
    resuming it into the same end, and fails on any other error."""
    out = str(tmp_path / "dry")
    argv = ["--dynamic-sampling", "--max-gen-rounds", "1", "--max-steps", "2", "--eval-every", "0", "--eval-problems",
            "8", "--eval-samples", "0", "--save-every", "1", "--seed", "0", "--output-dir", out]
    assert reproduce.run_one(argv, out, resume=True) is None
    assert reproduce.why_ended(out).startswith("error: step 1: dynamic sampling: only ") and reproduce.ran_dry(out)
    assert json.load(open(os.path.join(out, "run.json")))["failed"] == 2
    assert not [d for d in os.listdir(out) if d.startswith("checkpoint")]
    assert reproduce.run_one(argv, out, resume=True) == 0.0  # reused: not run again
    bad = str(tmp_path / "bad")
    with pytest.raises(SystemExit, match="^error: train.py failed \\(exit 2\\)"):
        reproduce.run_one(argv[:-1] + [bad, "--max-steps", "x"], bad)
    assert not reproduce.ran_dry(bad)
