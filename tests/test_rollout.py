"""rollout.py (HFEngine, FastEngine) on the tiny model: shapes, EOS cutting, truncation, decoding, determinism; FastEngine
gives HFEngine's samples token for token; tokenizer round trip.

Run:  python -m pytest tests/test_rollout.py -q        (about 15 s on CPU, plus the one-time tiny-model build
                                                        of the `tiny_model_path` fixture in conftest.py)
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import rollout
from engines.hf import FastEngine, HFEngine
from rollout import SamplingParams
from tasks.addition import builtin_task
from tasks.templates import INSTRUCTION, PLAIN_TEMPLATE, build_prompt
from tools import tiny


@pytest.fixture(scope="module", params=["hf", "fast"])
def setup(tiny_model_path, request):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)  # exactly as train.py / evaluate.py load it
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    model.eval()
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(3, split="test", seed=5)]
    return tok, model, rollout.make_engine(request.param, model, tok), prompts


def _check_invariants(tok, groups, n_prompts, n, max_new):
    eos = tok.eos_token_id
    assert len(groups) == n_prompts and all(len(g) == n for g in groups)
    for g in groups:
        for c in g:
            assert c.length == len(c.token_ids) >= 1
            if c.truncated:
                assert len(c.token_ids) == max_new and eos not in c.token_ids
            else:
                assert c.token_ids[-1] == eos and eos not in c.token_ids[:-1]  # cut right after the first EOS
                assert len(c.token_ids) <= max_new
            assert c.text == tok.decode(c.token_ids, skip_special_tokens=True)


def test_sampled_groups(setup):
    tok, model, eng, prompts = setup
    torch.manual_seed(0)
    groups = eng.generate(prompts, 3, SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=24))
    _check_invariants(tok, groups, len(prompts), 3, 24)


class _Logits:
    """Forward hook on lm_head: per batch row, force EOS (+1e4) or forbid it (-1e4) at every step."""

    def __init__(self, eos, force_rows):
        self.eos, self.force_rows = eos, force_rows

    def __call__(self, module, inp, out):
        out = out.clone()
        rows = torch.tensor([i in self.force_rows for i in range(out.shape[0])])
        out[rows, :, self.eos] = 1e4
        out[~rows, :, self.eos] = -1e4
        return out


def test_eos_cut_and_truncation_in_one_batch(setup):
    """The last row ends at once (EOS; HFEngine pads it, FastEngine drops it); the others never emit EOS and hit
    max_new_tokens. (The last row: dropping it leaves the other rows' batch positions, which the hook uses.)"""
    tok, model, eng, prompts = setup
    last = len(prompts) - 1
    h = model.lm_head.register_forward_hook(_Logits(tok.eos_token_id, force_rows={last}))
    try:
        groups = eng.generate(prompts, 1, SamplingParams(temperature=1.0, max_new_tokens=7))
    finally:
        h.remove()
    _check_invariants(tok, groups, len(prompts), 1, 7)
    first = groups[last][0]
    assert (first.token_ids, first.text, first.length, first.truncated) == ([tok.eos_token_id], "", 1, False)
    for g in groups[:last]:
        assert g[0].truncated and g[0].length == 7


def test_greedy_deterministic_and_identical_across_n(setup):
    tok, model, eng, prompts = setup
    p = SamplingParams(temperature=0.0, max_new_tokens=16)
    a = eng.generate(prompts, 3, p)
    b = eng.generate(prompts, 3, p)
    _check_invariants(tok, a, len(prompts), 3, 16)
    ids = [[c.token_ids for c in g] for g in a]
    assert ids == [[c.token_ids for c in g] for g in b]
    assert all(g[0] == g[1] == g[2] for g in ids)
    # left padding is right: each prompt alone (and in chunks of 2) gives what it gives in the full batch
    alone = [eng.generate([q], 1, p)[0][0].token_ids for q in prompts]
    assert alone == [g[0] for g in ids]
    chunked = type(eng)(model, tok, max_batch=2).generate(prompts, 3, p)
    assert [[c.token_ids for c in g] for g in chunked] == ids


def test_sampling_reproducible_with_seed(setup):
    tok, model, eng, prompts = setup
    p = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=12)
    torch.manual_seed(1234)
    a = [[c.token_ids for c in g] for g in eng.generate(prompts[:2], 2, p)]
    torch.manual_seed(1234)
    b = [[c.token_ids for c in g] for g in eng.generate(prompts[:2], 2, p)]
    assert a == b


def test_model_side_sampling_defaults_are_ignored(setup):
    """A generation_config with top_k / repetition_penalty (as Qwen ships) must not change what is sampled."""
    tok, model, eng, prompts = setup
    p = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=12)
    torch.manual_seed(7)
    a = [[c.token_ids for c in g] for g in eng.generate(prompts[:2], 2, p)]
    gc = model.generation_config
    old = (gc.top_k, gc.repetition_penalty)
    gc.top_k, gc.repetition_penalty = 1, 5.0
    try:
        torch.manual_seed(7)
        b = [[c.token_ids for c in g] for g in eng.generate(prompts[:2], 2, p)]
    finally:
        gc.top_k, gc.repetition_penalty = old
    assert a == b


def test_training_flag_restored(setup):
    tok, model, eng, prompts = setup
    p = SamplingParams(temperature=0.0, max_new_tokens=2)
    model.train()
    try:
        eng.generate(prompts[:1], 1, p)
        assert model.training
    finally:
        model.eval()
    eng.generate(prompts[:1], 1, p)
    assert not model.training


@pytest.mark.parametrize("params", [SamplingParams(1.0, 1.0, 40), SamplingParams(0.7, 0.9, 40), SamplingParams(0.0, 1.0, 40)],
                         ids=["t1", "t0.7-top_p0.9", "greedy"])
@pytest.mark.parametrize("max_batch", [512, 20])  # 20: chunks that split a prompt's group
def test_fast_engine_gives_hf_samples(tiny_model_path, params, max_batch):
    """Same seed, same samples: every token of every row, and the random stream left in the same state."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(6, split="train", seed=3)]
    res = {}
    for E in (HFEngine, FastEngine):
        torch.manual_seed(11)
        groups = E(model, tok, max_batch=max_batch).generate(prompts, 8, params)
        res[E.__name__] = ([[(c.token_ids, c.text, c.length, c.truncated) for c in g] for g in groups], torch.rand(3))
    (hf, hf_next), (fast, fast_next) = res["HFEngine"], res["FastEngine"]
    assert fast == hf
    assert torch.equal(fast_next, hf_next)
    if params.temperature > 0:
        lengths = [c[2] for g in hf for c in g]
        assert min(lengths) < max(lengths)  # rows finished at different steps: the fast loop dropped some mid-batch
        assert len({tuple(c[0]) for c in hf[0]}) > 1  # a prompt's 8 samples differ


def _round_trip_texts():
    texts = []
    for ex in builtin_task(20, split="train", seed=9):
        texts.append(PLAIN_TEMPLATE.replace("{question}", ex.prompt) + ex.solution)
    texts.append("Question: 3+4\n" + INSTRUCTION + "\nAnswer: 3+4=7 \\boxed{7}")
    texts.append("a  b\n\nc ~ {x} \\boxed{ }")
    return texts


def test_tiny_tokenizer_round_trip_in_memory():
    tok = tiny.build_tokenizer()
    for s in _round_trip_texts():
        ids = tok(s, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == s


def test_tiny_tokenizer_round_trip_as_loaded(tiny_model_path):
    """The tokenizer train.py / evaluate.py load with AutoTokenizer must tokenize as the SFT tokenizer did.

    BUG (tools/tiny.py build_tokenizer): transformers 5.x forces `Qwen2Tokenizer` for model_type "qwen2"
    (MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS), which installs Qwen2's byte-level pre-tokenizer; the tiny vocab
    holds raw " " and "\\n", not the byte-level "Ġ" / "Ċ", so every space and newline outside the added template
    pieces is silently dropped on encode. Fails until tools/tiny.py builds a byte-level-alphabet vocab.
    """
    from transformers import AutoTokenizer

    loaded, built = AutoTokenizer.from_pretrained(tiny_model_path), tiny.build_tokenizer()
    for s in _round_trip_texts():
        ids = loaded(s, add_special_tokens=False)["input_ids"]
        assert ids == built(s, add_special_tokens=False)["input_ids"], s
        assert loaded.decode(ids) == s


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8)])
def test_fast_engine_logprobs_are_the_sampling_distributions(tiny_model_path, temperature, top_p):
    """Completion.logprobs of the fast engine: log pi(token) under the distribution each token was drawn from. Without
    top-p that is log_softmax(logits / T) of a forward pass over the whole sequence (grpo.token_logprobs, what the
    trainer computes), to float rounding: the decode loop's incremental KV-cache attention sums in another order.
    With top-p the nucleus is renormalised: each log-prob is the full one plus -log(nucleus mass) >= it."""
    from trainer import batches
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.logprobs import response_logprobs

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(4, split="train", seed=4)]
    torch.manual_seed(0)
    comps = [c for g in FastEngine(model, tok).generate(prompts, 4, SamplingParams(temperature, top_p, 40)) for c in g]
    assert all(c.logprobs is not None and len(c.logprobs) == c.length for c in comps)
    p_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts for _ in range(4)]
    batch = batches.make_batch(tok, p_ids, [c.token_ids for c in comps], "cpu")
    with torch.no_grad():
        ref, _ = response_logprobs(model, batch, temperature)
    gaps = [torch.tensor(c.logprobs) - ref[i, : c.length] for i, c in enumerate(comps)]
    if top_p == 1.0:
        assert max(g.abs().max().item() for g in gaps) < 1e-5
    else:
        assert min(g.min().item() for g in gaps) > -1e-4 and max(g.max().item() for g in gaps) > 1e-3  # renormalised


def test_auto_engine_is_fast_on_the_cpu_and_generate_on_a_gpu(trained_model_path):
    """--rollout auto (the default): the faster engine where each was measured (rollout.auto_engine's docstring)."""
    import rollout
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert rollout.auto_engine("cpu") == "fast" and rollout.auto_engine("cuda") == "hf"
    model = AutoModelForCausalLM.from_pretrained(trained_model_path)
    eng = rollout.make_engine("auto", model, AutoTokenizer.from_pretrained(trained_model_path))
    assert type(eng) is rollout.FastEngine


def test_inverse_cdf_hand_computed():
    """The first token whose cumulative probability exceeds u * total; a zero-probability token is never drawn, not
    even at u = 0 or u = 1 - 2^-53, and an unnormalised row gives the same draws as its normalised one."""
    from engines.hf import inverse_cdf

    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.0]] * 6, dtype=torch.float64)  # cdf 0.1 0.1 0.7 1.0 1.0
    u = torch.tensor([0.0, 0.05, 0.1, 0.69, 0.71, 1 - 2**-53], dtype=torch.float64)
    assert inverse_cdf(probs, u).tolist() == [0, 0, 2, 2, 3, 3]
    assert inverse_cdf(probs * 7.0, u).tolist() == [0, 0, 2, 2, 3, 3]


def test_inverse_cdf_samples_the_distribution():
    """200,000 draws from a 50-token distribution with zeros (top-p's cut): each token's frequency within 5 standard
    errors of its probability, no zero-probability token."""
    from engines.hf import inverse_cdf

    g = torch.Generator().manual_seed(0)
    p = torch.rand(50, generator=g) ** 3
    p[torch.randperm(50, generator=g)[:10]] = 0
    p = (p / p.sum()).float()
    n = 200_000
    draws = inverse_cdf(p.expand(n, -1), torch.rand(n, generator=g, dtype=torch.float64))
    freq = torch.bincount(draws, minlength=50).double() / n
    se = (p.double() * (1 - p.double()) / n).sqrt()
    assert (freq[p == 0] == 0).all()
    assert ((freq - p.double()).abs() <= 5 * se + 1e-12).all()


def test_fast_engine_inverse_cdf_draw(tiny_model_path):
    """--draw inverse-cdf: greedy unchanged; sampled rows reproducible from the seed, each token's log-prob that of
    the distribution it was drawn from (as the multinomial draw's), other samples than multinomial's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval()
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(4, split="train", seed=2)]

    def run(draw, params):
        torch.manual_seed(3)
        return [c for g in FastEngine(model, tok, draw=draw).generate(prompts, 8, params) for c in g]

    greedy = SamplingParams(0.0, 1.0, 30)
    assert [c.token_ids for c in run("inverse-cdf", greedy)] == [c.token_ids for c in run("multinomial", greedy)]
    sampled = SamplingParams(1.0, 0.9, 30)
    a, b, m = run("inverse-cdf", sampled), run("inverse-cdf", sampled), run("multinomial", sampled)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.token_ids for c in a] != [c.token_ids for c in m]
    assert all(len(c.logprobs) == c.length and max(c.logprobs) <= 0 for c in a)


def test_bf16_rollout_copy_generates_as_the_cast_policy(tiny_model_path):
    """--rollout-dtype bfloat16: the engine's copy samples, token for token, what the policy cast to bf16 samples; after
    the policy changes, sync_weights brings the copy along; the policy itself is untouched (dtype, attention)."""
    import copy

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32, attn_implementation="eager")
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(3, split="train", seed=6)]
    params = SamplingParams(1.0, 1.0, 30)
    engine = FastEngine(policy, tok, dtype=torch.bfloat16)
    assert engine.model is not policy and engine.model.dtype == torch.bfloat16
    assert policy.dtype == torch.float32 and policy.config._attn_implementation == "eager"

    def samples(eng):
        torch.manual_seed(5)
        return [c.token_ids for g in eng.generate(prompts, 4, params) for c in g]

    def cast():
        return FastEngine(copy.deepcopy(policy).to(torch.bfloat16), tok)

    assert samples(engine) == samples(cast())
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    before = samples(engine)
    engine.sync_weights(policy)
    assert samples(engine) == samples(cast()) != before


def test_bf16_rollout_copy_of_a_lora_policy_is_the_merged_model(tiny_model_path):
    """A LoRA policy's copy (trainer.lora.MergedWeights): the samples of the merged model cast to bf16."""
    import types

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer import lora

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    cfg = types.SimpleNamespace(lora_rank=4, lora_alpha=8, lora_dropout=0.0, lora_targets="", seed=0,
                                gradient_checkpointing=False, rollout="fast", rollout_dtype="bfloat16")
    peft_model = lora.wrap(base, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)  # a trained adapter (B starts at 0)
    prompts = [build_prompt(tok, ex.prompt) for ex in builtin_task(3, split="train", seed=7)]
    params = SamplingParams(1.0, 1.0, 30)

    def samples(eng):
        torch.manual_seed(8)
        return [c.token_ids for g in eng.generate(prompts, 4, params) for c in g]

    engine = rollout.make_engine("fast", lora.engine_view(peft_model, cfg), tok, dtype=torch.bfloat16)
    merged = lora.merged_model(peft_model).to(torch.bfloat16)
    assert samples(engine) == samples(FastEngine(merged, tok))


@pytest.mark.parametrize("argv, needle", [
    (["--draw", "inverse-cdf", "--rollout", "hf"], "error: --draw: is the fast engine's draw"),
    (["--rollout-dtype", "bfloat16", "--rollout-lag", "1"], "--rollout-dtype bfloat16"),
    (["--draw", "gumbel"], "error: --draw: 'gumbel' is not one of multinomial, inverse-cdf"),
])
def test_rollout_speed_flags_refused_where_they_do_not_apply(argv, needle):
    import config

    with pytest.raises(SystemExit) as e:
        config.parse_config(argv)
    assert needle in str(e.value)
