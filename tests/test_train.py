"""End-to-end runs of train.py: outputs, exact resume, recipes, and bad input.  Run: python -m pytest tests/test_train.py -q"""
import json
import os

import pytest
import torch

import config
import data
import train
import trainer.setup
from trainer import batches
from trainer.records import UpdateBatch

SMALL = ["--batch-size", "16", "--group-size", "4", "--mini-batch-size", "8", "--micro-batch-size", "4",
         "--eval-problems", "12", "--max-new-tokens", "40", "--reward-workers", "0", "--eval-every", "0"]


def run(model, out, *args):
    return train.main(["--model", model, "--output-dir", str(out), *SMALL, *args])


def test_two_step_run_writes_everything(tiny_model_path, tmp_path):
    out = tmp_path / "run"
    hist = run(tiny_model_path, out, "--max-steps", "2")
    assert len(hist) == 2
    for f in ("metrics.jsonl", "curves.png", "samples.jsonl", "summary.json", "config.json", "checkpoint-2/trainer_state.pt",
              "checkpoint-2/model.safetensors", "checkpoint-2/tokenizer.json"):
        assert (out / f).exists(), f
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2]
    for k in ("reward/mean", "reward/std", "rollout/accuracy", "rollout/frac_zero_std", "rollout/response_length",
              "rollout/response_length_max", "rollout/truncated_frac", "policy/clip_frac_low", "policy/clip_frac_high",
              "policy/kl", "policy/entropy", "perf/grad_norm", "perf/tokens_per_s", "perf/step_time_s"):
        assert k in rows[0], k
    for r in rows:  # a group with no signal is all correct or all wrong (a 1/0 reward)
        assert r["rollout/frac_all_correct"] + r["rollout/frac_all_wrong"] == pytest.approx(r["rollout/frac_zero_std"])
    s = json.load(open(out / "summary.json"))
    assert {"accuracy_before", "accuracy_after", "wall_time_s"} <= set(s) and s["eval_problems"] == 12
    assert not any(d.endswith(".tmp") for d in os.listdir(out))  # checkpoints are renamed into place


def _weights(path):
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "model.safetensors"))


def _strip_perf(rows):
    return [{k: v for k, v in r.items() if not k.startswith("perf/") or k in ("perf/grad_norm", "perf/lr")} for r in rows]


def test_resume_matches_uninterrupted_run(tiny_model_path, tmp_path):
    """4 steps straight vs 2 steps, stop, resume to 4 (mu > 1 so old log-probs and clipping are exercised)."""
    extra = ["--save-every", "2", "--seed", "3", "--epochs", "2", "--kl-coef", "0.01"]
    full = run(tiny_model_path, tmp_path / "a", "--max-steps", "4", *extra)
    run(tiny_model_path, tmp_path / "b", "--max-steps", "2", *extra)
    resumed = run(tiny_model_path, tmp_path / "b", "--max-steps", "4", "--resume", "auto", *extra)
    assert _strip_perf(full) == _strip_perf(resumed)
    wa, wb = _weights(tmp_path / "a" / "checkpoint-4"), _weights(tmp_path / "b" / "checkpoint-4")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    rows = [json.loads(line) for line in open(tmp_path / "b" / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]


@pytest.mark.parametrize("timing", ["code", "paper"])
def test_resume_keeps_the_entropy_estimate(tiny_model_path, tmp_path, timing):
    """Skywork's controller resumes with its estimate: under code timing step 3 uses rollout 2's NLL, observed in the
    update before the checkpoint and held by entropy.AdaptiveEntropy (its state_dict), so 2 + 2 steps equal 4."""
    extra = ["--recipe", "skywork", "--curriculum", "", "--no-online-filter", "--entropy-target", "100",  # no stages:
             "--entropy-delta", "1e-3", "--no-rejection-sampling", "--entropy-timing", timing,  # they follow --max-steps
             "--save-every", "2", "--seed", "3"]
    full = run(tiny_model_path, tmp_path / "a", "--max-steps", "4", *extra)
    run(tiny_model_path, tmp_path / "b", "--max-steps", "2", *extra)
    resumed = run(tiny_model_path, tmp_path / "b", "--max-steps", "4", "--resume", "auto", *extra)
    assert _strip_perf(full) == _strip_perf(resumed)
    assert all("policy/entropy_estimate" in r for r in full[1:])


@pytest.mark.parametrize("recipe", list(config.RECIPES))
def test_every_recipe_runs_two_steps(trained_model_path, tmp_path, recipe):
    extra = []
    if recipe == "c3po":  # its code stage evaluates 100 problems (sandboxed); 4 here. Math then code, 1 step each
        extra = ["--stages", config.RECIPES["c3po"]["stages"].replace("eval_problems=100", "eval_problems=4")]
    hist = run(trained_model_path, tmp_path / recipe, "--recipe", recipe, "--max-steps", "2", "--max-gen-rounds", "20", *extra)
    cfg = json.load(open(tmp_path / recipe / "config.json"))
    # mu = epochs x batch / mini-batch = 1 x 16 / 8 updates a step; Skywork's rejection sampling skips the update when
    # every group has zero advantage (nothing left to train on)
    skipped = [bool(cfg["rejection_sampling"]) and r["rollout/frac_zero_std"] == 1.0 for r in hist]
    assert len(hist) == 2 and [r["policy/updates"] for r in hist] == [0 if s else 2 for s in skipped], (recipe, hist)
    given = {a[2:].replace("-", "_") for a in SMALL + extra if a.startswith("--")}  # flags given win over the preset
    given_values = config.parse_config(SMALL + extra).__dict__  # what those flags say, without the preset
    if recipe == "c3po":
        assert [r["stage"] for r in hist] == [1, 2] and hist[1]["rollout/response_length_max"] <= 96
    for k, v in config.RECIPES[recipe].items():
        assert cfg[k] == (given_values[k] if k in given else v), (recipe, k)
        assert config.parse_config(["--recipe", recipe]).__dict__[k] == v, (recipe, k)  # the preset itself
    if cfg["dynamic_sampling"]:
        assert all(r["rollout/frac_zero_std"] == 0.0 for r in hist)  # no zero-std group reaches the update
    if recipe == "dapo":  # each round draws 3 x the step's 4 prompts (verl gen_batch_size), G = 4 each
        assert all(r["rollout/generated"] == r["rollout/gen_rounds"] * 3 * 16 for r in hist)
    if recipe == "compass":  # stages switch at step 1 of 2; Compass-Thinker drops no solved prompts (Skywork's filter)
        assert not cfg["online_filter"] and hist[-1]["data/stage"] > 0 and hist[-1]["data/dropped_total"] == 0
    if recipe == "mimo":  # all-correct groups, dropped by dynamic sampling, still reach the easy pool
        assert hist[-1]["data/easy_pool_size"] > 0


def test_seamless_mimo_feeds_the_easy_pool(trained_model_path, tmp_path):
    """--seamless (MiMo's scheduler; waves on the HF engine): full batches of mixed groups, its metrics logged, and
    the all-correct groups it scored (never kept) still reach MiMo's easy pool."""
    hist = run(trained_model_path, tmp_path / "s", "--recipe", "mimo", "--seamless", "--max-steps", "2", "--max-gen-rounds", "20")
    assert len(hist) == 2 and all(r["rollout/frac_zero_std"] == 0.0 for r in hist)
    for k in ("rollout/sample_waste", "rollout/surplus_waste", "rollout/reward_wait_frac", "rollout/pass_rate_est"):
        assert k in hist[-1], k
    assert hist[-1]["data/easy_pool_size"] > 0


def test_recipe_flag_overrides_preset():
    cfg = config.parse_config(["--recipe", "dapo", "--clip-high", "0.25", "--no-dynamic-sampling"])
    assert cfg.clip_high == 0.25 and not cfg.dynamic_sampling and cfg.loss_agg == "token-mean"


@pytest.mark.parametrize("args, needle", [
    (["--group-size", "1"], "--group-size: must be >= 2"),
    (["--batch-size", "10", "--group-size", "4"], "--batch-size: 10 is not divisible by --group-size 4"),
    (["--mini-batch-size", "5"], "--mini-batch-size"),
    (["--recipe", "nope"], "--recipe"),
    (["--tis-cap", "2"], "--tis-cap: needs the sampling log-probs of --rollout vllm"),
    (["--tis-cap", "0.5", "--rollout", "vllm"], "--tis-cap: must be 0 (off) or >= 1"),
])
def test_bad_config_stops_before_writing(tmp_path, args, needle):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        train.main(["--output-dir", str(out), *args])
    assert needle in str(e.value) and not out.exists()


FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "math")


@pytest.mark.parametrize("fname, needle", [
    ("bad_missing_answer.jsonl", "bad_missing_answer.jsonl:3"),
    ("bad_unknown_schema.jsonl", "unknown schema"),
    ("bad_json.jsonl", "bad_json.jsonl:2"),
    ("bad_binary.parquet", "cannot read"),
    ("does_not_exist.jsonl", "no such file"),
])
def test_bad_data_stops_before_writing(tmp_path, fname, needle):
    out = tmp_path / "run"
    with pytest.raises(data.DataError) as e:
        train.main(["--output-dir", str(out), "--train-data", os.path.join(FIX, fname)])
    assert needle in str(e.value) and not out.exists()


def test_missing_model_stops_before_writing(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        train.main(["--output-dir", str(out), "--model", str(tmp_path / "no_such_model"), "--eval-problems", "5"])
    assert "no_such_model" in str(e.value) and not out.exists()


def test_code_reward_path_runs(tiny_model_path, tmp_path):
    """--reward code-*: code problems, sandboxed tests as reward. The tiny model writes no Python: reward 0, but it runs."""
    code = os.path.join(os.path.dirname(__file__), "..", "fixtures", "code", "problems.jsonl")
    hist = run(tiny_model_path, tmp_path / "code", "--reward", "code-strict", "--train-data", code, "--eval-data", code,
               "--max-steps", "2", "--eval-problems", "4")
    assert len(hist) == 2 and all(r["reward/mean"] == 0.0 for r in hist)
    assert json.load(open(tmp_path / "code" / "summary.json"))["eval_problems"] == 4


def test_split_micro_cuts_by_padded_tokens_in_length_order():
    p = [[1] * 10] * 6
    r = [[1] * 5, [1] * 64, [1] * 3, [1] * 12, [1] * 5, [1] * 40]
    # sorted by response length 3,5,5,12 | 40,64: a fifth row would pad 5 rows to 10 + 40 = 250 tokens > 200
    assert batches.split_micro(list(range(6)), p, r, 256, 200) == [[2, 0, 4, 3], [5, 1]]
    assert batches.split_micro(list(range(6)), p, r, 3, 10**6) == [[2, 0, 4], [3, 5, 1]]  # row cap still holds
    assert batches.split_micro(list(range(6)), p, r, 2, 0) == [[0, 1], [2, 3], [4, 5]]  # off: rollout order
    assert batches.split_micro([5], p, r, 4, 10) == [[5]]  # a row longer than the budget goes alone
    assert batches.split_micro([], p, r, 4, 100) == [[]]


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean", "seq-mean-token-sum"])
def test_length_sorted_micro_batches_give_the_one_batch_gradient(tiny_model_path, agg):
    """--micro-batch-tokens: sorting a mini-batch by length and cutting it by padded size changes no gradient
    (float64: equal to rounding), and the budget used here does cut it into several micro-batches."""
    import types

    from accelerate import Accelerator

    from engines.loading import load_model

    acc = Accelerator(cpu=True)
    model, tok = load_model(tiny_model_path, torch.float64)
    model.config.use_cache = False
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    model.train()
    grads = []
    optimizer.step = lambda *a, **k: grads.append(torch.cat([p.grad.detach().flatten().clone() for p in model.parameters()]))
    g = torch.Generator().manual_seed(7)
    p_ids, r_ids = [], []
    for _ in range(4):
        p = torch.randint(5, len(tok), (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist()
        for _ in range(4):
            p_ids.append(p)
            r_ids.append(torch.randint(5, len(tok), (int(torch.randint(1, 30, (1,), generator=g)),), generator=g).tolist())
    adv = torch.randn(16, generator=g, dtype=torch.float64)
    for tokens in (0, 120):
        cfg = config.Config(batch_size=16, group_size=4, mini_batch_size=16, micro_batch_size=16, micro_batch_tokens=tokens,
                           loss_agg=agg, lr=0.0, grad_clip=1e9, max_new_tokens=32)
        learner = types.SimpleNamespace(cfg=cfg, accelerator=acc, model=model, ref_model=None, optimizer=optimizer, tok=tok, ent_ctrl=None)
        train.update_policy(learner, UpdateBatch(p_ids, r_ids, adv, [False] * 16), 0.0, 0)
        optimizer.zero_grad(set_to_none=True)
    assert len(batches.split_micro(list(range(16)), p_ids, r_ids, 16, 120)) >= 3
    assert torch.allclose(grads[0], grads[1], rtol=1e-9, atol=1e-12)
    assert grads[0].abs().sum() > 0


def test_old_logprobs_use_the_run_temperature():
    """log pi_old (mu > 1, computed once before the first update) is the log-prob of what the engine sampled from:
    softmax(logits / --temperature), as the update's own log-probs are; here against each row's full logits in
    float64, one unpadded row at a time (at T 0.7 the T-1 log-probs are far off)."""
    import types

    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=40, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                         num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
                                         initializer_range=0.5)).double().eval()
    tok = types.SimpleNamespace(pad_token_id=0)
    p_ids, r_ids = [[5, 6, 7], [8, 9], [10, 11, 12, 13]], [[14, 15, 16, 17], [18, 19], [20, 21, 22]]
    for T in (0.7, 1.0, 1.3):
        got = batches.old_logprobs(config.Config(temperature=T, micro_batch_size=2), model, tok, p_ids, r_ids, "cpu")
        for p, r, lp in zip(p_ids, r_ids, got):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([p + r])).logits[0, len(p) - 1 : -1]  # (len r, V)
            want = torch.log_softmax(logits / T, -1)[torch.arange(len(r)), torch.tensor(r)]
            assert lp.shape == (len(r),) and torch.allclose(lp, want, atol=1e-10), T
            at_one = torch.log_softmax(logits, -1)[torch.arange(len(r)), torch.tensor(r)]
            assert T == 1.0 or (lp - at_one).abs().max() > 0.1, T  # the temperature matters in this model


# Skywork-OR1's controller as train.py wires it, against hand-computed traces (target 0.2, Delta 1e-3, clamp [0, 5e-3]).
# Rollout NLLs e_0..e_4 = 0.3, 0.1, 0.1, 0.25, 0.1.
#   code timing (released trainer, update after the actor step): step k feeds e_{k-1}, updates c, uses c * 1{e_{k-1} < tgt}
#     step 0: no estimate -> 0;  1: e=.3, c=0 (clamped) -> 0;  2: e=.1, c=1e-3 -> 1e-3;  3: e=.1, c=2e-3 -> 2e-3;
#     4: e=.25, c=1e-3, off -> 0
#   paper timing (Eq. 3.2): step k uses c_k * 1{e_k <= tgt}, then c_{k+1} from e_k
#     0: c=0 -> 0 (c -> 0);  1: c=0 -> 0 (c -> 1e-3);  2: 1e-3 (c -> 2e-3);  3: e=.25 off -> 0 (c -> 1e-3);  4: 1e-3
NLLS = [0.3, 0.1, 0.1, 0.25, 0.1]
TRACE = {"code": [0.0, 0.0, 1e-3, 2e-3, 0.0], "paper": [0.0, 0.0, 1e-3, 0.0, 1e-3]}


@pytest.mark.parametrize("timing", ["code", "paper"])
def test_entropy_coefficient_wiring_follows_hand_trace(timing, monkeypatch):
    import types

    import entropy

    cfg = config.parse_config(["--recipe", "skywork", "--entropy-delta", "1e-3", "--entropy-timing", timing])
    ctrl = entropy.AdaptiveEntropy(cfg.entropy_target, cfg.entropy_delta, c_max=cfg.entropy_max, timing=cfg.entropy_timing,
                                   strict=cfg.entropy_timing == "code")
    accelerator = types.SimpleNamespace(device="cpu", reduce=lambda t, op: t)  # one process
    run_ = types.SimpleNamespace(cfg=cfg, ent_ctrl=ctrl, accelerator=accelerator, model=None, tok=None)
    batch = UpdateBatch([[1]], [[2]], torch.zeros(1), [False])
    k = [0]
    sampled = lambda: torch.tensor([-NLLS[k[0]]])  # noqa: E731  log pi_old of a one-token rollout whose NLL is NLLS[k]
    monkeypatch.setattr(train, "old_logprobs", lambda *a: [sampled()])  # paper timing: this rollout, before its update
    got = []
    for k[0] in range(len(NLLS)):
        got.append(train.entropy_coef(run_, batch, {}))
        ctrl.observe(sampled().view(1, 1), torch.ones(1, 1))  # the update's pass (code timing; paper ignores it)
    assert got == pytest.approx(TRACE[timing], abs=1e-12)


def test_entropy_timings_feed_previous_vs_current_rollout(trained_model_path, tmp_path):
    # target 100: the bonus is always on and c ramps by Delta per step in both timings, so the two runs are the same
    # run; the estimate logged at step k must be rollout k-1's NLL (code) or rollout k's own (paper)
    rows = {t: run(trained_model_path, tmp_path / t, "--recipe", "skywork", "--max-steps", "3", "--entropy-target", "100",
                   "--entropy-delta", "1e-3", "--entropy-timing", t, "--no-rejection-sampling") for t in ("code", "paper")}
    assert [r["policy/entropy_coef"] for r in rows["code"]] == pytest.approx([0.0, 1e-3, 2e-3])
    assert [r["policy/entropy_coef"] for r in rows["paper"]] == pytest.approx([0.0, 1e-3, 2e-3])
    assert "policy/entropy_estimate" not in rows["code"][0]
    for k in (1, 2):
        assert rows["code"][k]["policy/entropy_estimate"] == pytest.approx(rows["paper"][k - 1]["policy/entropy_estimate"], rel=1e-5)
    assert rows["paper"][0]["policy/entropy_estimate"] > 0


@pytest.mark.parametrize("reward,metric", [("math", "acc"), ("math-strict", "acc"), ("code", "acc"),
                                           ("code-strict", "score"), ("code-soft", "score")])
def test_filter_metric_default_follows_the_reward(reward, metric):
    assert config.parse_config(["--reward", reward]).filter_metric == metric
    assert config.parse_config(["--reward", reward, "--filter-metric", "acc"]).filter_metric == "acc"


def test_partial_credit_groups_are_kept_by_dynamic_sampling(trained_model_path, tmp_path, monkeypatch):
    # a verifier that never says "correct" but gives partial credit that differs within a group (as code-strict /
    # code-soft do for a program passing some tests): the acc filter can keep nothing, the score filter keeps them
    def partial(texts, golds, truncated=None):
        return [0.5 * (len(t) % 2) for t in texts], [False] * len(texts), {"reward/timeouts": 0}

    monkeypatch.setattr(trainer.setup, "make_reward", lambda cfg, reward, thought_open=False: partial)
    hist = run(trained_model_path, tmp_path / "score", "--dynamic-sampling", "--filter-metric", "score", "--max-steps", "1")
    assert hist[0]["rollout/accuracy"] == 0.0 and hist[0]["rollout/frac_zero_std"] == 0.0 and hist[0]["reward/std"] > 0
    with pytest.raises(SystemExit, match="^error: step 1: dynamic sampling: .*mixed correctness"):  # one error line
        run(trained_model_path, tmp_path / "acc", "--dynamic-sampling", "--filter-metric", "acc", "--max-steps", "1",
            "--max-gen-rounds", "2")


@pytest.mark.parametrize("recipe,T,top_p", [("dapo", 1.0, 0.7), ("mimo", 0.6, 0.95), ("grpo", 1.0, 1.0)])
def test_sampled_evaluation_at_the_recipes_settings(trained_model_path, tmp_path, monkeypatch, recipe, T, top_p):
    # avg@k / pass@k at the paper's T and top-p, at the first and final evaluations only; greedy at every one
    import evaluate

    calls, real = [], evaluate.evaluate
    monkeypatch.setattr(evaluate, "evaluate", lambda *a, **kw: calls.append(kw) or real(*a, **kw))
    out = tmp_path / recipe
    run(trained_model_path, out, "--recipe", recipe, "--max-steps", "2", "--eval-every", "1", "--eval-samples", "3",
        "--max-gen-rounds", "20")
    assert [c["samples"] for c in calls] == [3, 0, 3]  # step 0, step 1 (greedy only), final
    assert all((c["temperature"], c["top_p"]) == (T, top_p) for c in calls)
    s = json.load(open(out / "summary.json"))
    for when in ("before", "after"):
        avg, pas = s[f"avg@3_{when}"], s[f"pass@3_{when}"]
        assert 0 <= avg <= pas <= 1 and s[when]["eval/pass@1"] == pytest.approx(avg)  # pass@1 is avg@k (unbiased)
        assert avg * 12 * 3 == pytest.approx(round(avg * 12 * 3))  # a count of correct samples out of 12 x 3


def test_all_correct_and_all_wrong_groups_by_hand():
    from trainer.metrics import _all_correct_wrong

    correct = [1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 1]  # G = 3: all right, all wrong, mixed, all right
    assert _all_correct_wrong(correct, 3) == (2, 1)
    assert _all_correct_wrong([True, False] * 2, 2) == (0, 0)


def test_an_old_checkpoint_format_is_one_error_line(tmp_path):
    """A checkpoint whose trainer_state.pt has an older layout (format 1: Skywork's estimate as a top-level last_nll)
    is refused with one `error:` line naming its format (cli: exit code 2), before anything is restored."""
    import types

    from trainer import checkpoints

    torch.save({"last_nll": 0.3, "entropy": {"c": 0.0}}, tmp_path / "trainer_state.pt")
    with pytest.raises(SystemExit, match=r"^error: --resume .*: its trainer_state.pt is format 1; this train.py resumes format 2"):
        checkpoints.restore(types.SimpleNamespace(), str(tmp_path), False)
