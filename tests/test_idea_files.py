"""The code a reader reads is the code that runs: a one-step run of each recipe calls its own idea file's advantages
and policy loss (grpo.py, dapo.py, c3po.py, gspo.py or cispo.py, `--algorithm`, set by the recipe) and never another
file's.

Each function is wrapped by a counter for the length of a real one-step `train.main` run, so a breakpoint in
`dapo.policy_loss` is hit by `python train.py --recipe dapo`, and an edit to it changes what the run computes.
Run:  python -m pytest -q tests/test_idea_files.py   (~1 min on 2 cores)
"""
import collections

import pytest

import c3po
import cispo
import config
import dapo
import entropy
import grpo
import gspo
import train

FILES = {"grpo": grpo, "dapo": dapo, "c3po": c3po, "gspo": gspo, "cispo": cispo}
# the file each recipe runs: Skywork-OR1's loss (Eq. 3.1) is DAPO's token-level loss with a symmetric eps, MiMo's and
# Compass-Thinker's are "DAPO-style" (clip-higher, token-level loss, dynamic sampling)
OWN = {"grpo": "grpo", "dapo": "dapo", "c3po": "c3po", "skywork": "dapo", "mimo": "dapo", "compass": "dapo", "gspo": "gspo",
       "cispo": "cispo"}
SMALL = ["--batch-size", "16", "--group-size", "4", "--mini-batch-size", "8", "--micro-batch-size", "4",
         "--eval-problems", "4", "--eval-samples", "0", "--max-new-tokens", "32", "--reward-workers", "0",
         "--eval-every", "0", "--max-steps", "1", "--max-gen-rounds", "20"]


def test_every_recipe_names_its_file():
    assert set(OWN) == set(config.RECIPES)
    for recipe, own in OWN.items():
        assert config.parse_config(["--recipe", recipe]).algorithm == own, recipe


@pytest.mark.parametrize("recipe", list(OWN))
def test_one_step_calls_its_own_file(recipe, trained_model_path, tmp_path, monkeypatch):
    calls = collections.Counter()

    def count(module, name):
        fn = getattr(module, name)

        def wrapped(*a, **k):
            calls[f"{module.__name__}.{name}"] += 1
            return fn(*a, **k)

        monkeypatch.setattr(module, name, wrapped)

    for m in FILES.values():
        for name in ("group_advantages", "policy_loss", "aggregate"):
            count(m, name)
    for m, name in [(dapo, "overlong_penalty"), (dapo, "overlong_mask"), (dapo, "filter_groups"), (c3po, "budget_select"),
                    (c3po, "budget_mask"), (entropy, "entropy_loss")]:
        count(m, name)
    extra = ["--stages", ""] if recipe == "c3po" else []  # math only: one step
    if recipe == "dapo":
        extra = ["--overlong-filter"]  # DAPO change 5 too (off in the recipe, as in the paper's "DAPO")
    train.main(["--model", trained_model_path, "--output-dir", str(tmp_path / recipe), "--recipe", recipe, *SMALL, *extra])

    own = OWN[recipe]
    assert calls[f"{own}.group_advantages"] == 1, calls  # one step, one advantage computation
    assert calls[f"{own}.policy_loss"] > 0, calls  # the entropy bonus aggregates through the idea file's aggregate too
    assert calls[f"{own}.aggregate"] == calls[f"{own}.policy_loss"] + calls["entropy.entropy_loss"], calls
    for other in set(FILES) - {own}:
        assert not any(k.startswith(other + ".") and k.split(".")[1] in ("group_advantages", "policy_loss", "aggregate")
                       for k in calls), (recipe, calls)
    assert (calls["dapo.overlong_penalty"] > 0) == (recipe == "dapo"), calls  # the recipes with --overlong-buffer
    assert (calls["dapo.overlong_mask"] > 0) == (recipe == "dapo"), calls
    assert (calls["dapo.filter_groups"] > 0) == (recipe in ("dapo", "mimo", "compass")), calls  # dynamic sampling
    assert (calls["c3po.budget_select"] > 0) == (calls["c3po.budget_mask"] > 0) == (recipe == "c3po"), calls
    assert (calls["entropy.entropy_loss"] > 0) == (recipe == "c3po"), calls  # Skywork's alpha_0 = 0 (code timing)


def test_every_sampler_answers_the_same_calls():
    """The plain order, MiMo's easy pool and a curriculum: draw(step, n), observe(indices, pass_rates), metrics(),
    state_dict() -- draw is the sampler's own order, and a sampler restored from its state draws what it would have."""
    import copy

    import curriculum
    import resample
    from trainer.samplers import EpochOrder

    stages = curriculum.compass_stages(6, 16, batch_size=4)
    make = [lambda: EpochOrder(20, 3), lambda: resample.EasyPool(20, alpha=0.5, seed=3),
            lambda: curriculum.Curriculum(stages, [1 + i % 5 for i in range(20)], seed=3, online_filter=True)]
    for mk in make:
        a, b = mk(), mk()
        for step in range(6):
            idx = a.draw(step, 4)
            assert len(idx) == 4 and all(0 <= i < 20 for i in idx)
            a.observe(idx, [1.0, 0.5, 1.0, 0.0])
            assert isinstance(a.metrics(), dict)
            if step == 2:
                b.load_state_dict(copy.deepcopy(a.state_dict()))
            elif step > 2:
                assert b.draw(step, 4) == idx
                b.observe(idx, [1.0, 0.5, 1.0, 0.0])


def test_plan_is_a_function_of_the_step():
    """--stages: the plan of any step (its stage, task, lengths) comes from the step alone, and planning changes nothing
    in the run, so the --rollout-lag producer may plan step k + 1 while the trainer runs step k."""
    import copy
    import types

    from trainer.samplers import EpochOrder
    from trainer.setup import Run, Task
    from trainer.stages import parse_stages

    cfg = config.parse_config(["--recipe", "c3po", "--max-steps", "4"])
    stages = parse_stages(cfg)
    for k, st in enumerate(stages):
        st.task = k
    tasks = [Task(st.kind, [], [], EpochOrder(1, 0), None, st.kind, st.max_new_tokens) for st in stages]
    run = Run(cfg, types.SimpleNamespace(num_processes=1), None, None, None, None, None, None, tasks, stages)
    before = copy.deepcopy({k: v for k, v in vars(run).items() if k not in ("cfg", "accelerator", "tasks")})
    plans = {k: run.plan(k) for k in (3, 0, 2, 1, 3)}
    assert [plans[k].task.kind for k in range(4)] == ["math", "math", "code", "code"]
    assert [plans[k].sampling.max_new_tokens for k in range(4)] == [64, 64, 96, 96]
    assert {k: v for k, v in vars(run).items() if k not in ("cfg", "accelerator", "tasks")} == before


@pytest.mark.parametrize("recipe, key, value", [("grpo", "clip_high", 0.25), ("dapo", "clip_high", 0.31),
                                                ("dapo", "overlong_filter", True), ("c3po", "kl_coef", 2e-3),
                                                ("gspo", "clip_low", 5e-4), ("cispo", "clip_high", 3.0)])
def test_a_paper_value_in_its_idea_file_reaches_the_run(recipe, key, value):
    """Each idea file states its paper's settings once (`PAPER`) and `--recipe` runs them: a value edited there (set
    here before config.py is imported, as an edit to the file would be) is the run's setting, and the loss the trainer
    then computes moves with it. A length the recipe scales to the built-in task is the recipe's own (config.scaled)."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (f"import json, {recipe}\n"
            f"{recipe}.PAPER[{key!r}] = {value!r}\n"
            "import config\n"
            f"cfg = config.parse_config(['--recipe', {recipe!r}])\n"
            f"print(json.dumps([getattr(cfg, {key!r}), config.parse_config(['--recipe', {recipe!r}, '--{key.replace('_', '-')}', "
            f"'{'0' if isinstance(value, bool) else value}']).__dict__[{key!r}]]))\n")
    if isinstance(value, bool):  # a store_true flag: given, it is True whatever the recipe says
        code = code.replace(f", '--{key.replace('_', '-')}', '0'", "")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr[-2000:]
    ran, _ = json.loads(out.stdout.strip().splitlines()[-1])
    assert ran == value and config.parse_config(["--recipe", recipe]).__dict__[key] != value, (recipe, key, ran)


def test_the_loss_follows_the_recipes_eps():
    """What `--recipe dapo` resolves is what the trainer's loss gets: train.loss_settings hands the run's eps to
    dapo.policy_loss, so dapo.PAPER's eps_high is the clip bound (a ratio of 1.25 on a positive advantage is inside
    1 + 0.28, and clipped at GRPO's 1 + 0.2)."""
    import dataclasses

    import torch

    cfg = config.parse_config(["--recipe", "dapo"])
    assert (cfg.clip_low, cfg.clip_high, cfg.loss_agg) == (dapo.PAPER["clip_low"], dapo.PAPER["clip_high"], dapo.PAPER["loss_agg"])
    logp, old, adv, mask = torch.log(torch.tensor([[1.25]])), torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1)
    for run_cfg, clipped in [(cfg, 0.0), (dataclasses.replace(cfg, clip_high=grpo.PAPER["clip_high"]), 1.0)]:
        settings = train.loss_settings(run_cfg)
        assert settings["clip_high"] == run_cfg.clip_high and settings["loss_agg"] == "token-mean"
        _, m = train.algorithm(run_cfg).policy_loss(logp, old, adv, mask, **settings)
        assert m["clip_frac_high"] == clipped
