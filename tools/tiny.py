"""An offline tiny Qwen2 model for the built-in task, with its cold-start SFT (the papers' SFT stage, in miniature).

Notable features
  * Built with no network: a character-level tokenizer (`tokenizers` BPE with an empty merge list, so every
    character is one token) and a randomly initialised `Qwen2ForCausalLM`, both written with
    `save_pretrained`, so `train.py` loads them through exactly the `from_pretrained` path a real model uses.
  * Cold-start SFT on solutions of the built-in task (loss on the response tokens only). As in real SFT data,
    the targets mix styles: 70% give the bare answer ("\\boxed{51}"), 30% the worked steps. The model learns
    both; greedy decoding answers outright (right 27% of the time, mostly on 1-step problems), while sampled
    worked solutions are right about twice as often. RL has to discover that reasoning step by step pays:
    response length grows and held-out accuracy climbs (measured: 0.27 -> 0.67 in 40 GRPO steps). Trained
    on worked steps only, the same model fails by copying the wrong operand, a skill gap that RL at this
    scale did not close (measured: flat accuracy over 40 steps at lr 3e-5, collapse at 2e-4).
  * Cached on disk under a hash of the recipe (architecture, SFT settings, tokenizer, task), so it is
    rebuilt only when missing or when its recipe changes.
  * Shipped: the default recipe's model (4 MB) is in the repository, `models/tiny-qwen2/`, so a first
    `python train.py` starts RL at once instead of spending ~8 minutes (2 cores) on the SFT. It is exactly
    what this file builds: `python -m tools.tiny --ship` rebuilds it from scratch and writes it there, and
    `tests/test_tiny.py` checks that its recipe key is the current one (fast) and that a fresh build gives the
    same weights, bit for bit (slow: the full SFT). The build is deterministic on one machine (seeded, 1
    thread); another CPU (other SIMD kernels) may round differently, so that test is meaningful where the
    model was built, and `get_tiny_model(use_shipped=False)` always builds.
  * The chat-shaped models (ChatRecipe): what a real checkpoint looks like from the outside, small enough to learn
    on a laptop. A byte-level BPE tokenizer trained here with `tokenizers` (Qwen2's pre-tokenizer: digits one by
    one; ~2,800 merges on a frozen copy of the project's docs and the task's conversations, models/bpe-corpus.txt.gz),
    Qwen2.5's special tokens and conventions (tokenizer EOS <|endoftext|>, turns <|im_start|> ... <|im_end|>, a
    default system turn, generation_config EOS [<|im_end|>, <|endoftext|>] with Qwen2.5-Instruct's sampling
    defaults), an embedding with more rows than the tokenizer has tokens, and the same cold start in chat form: the
    built-in task's solutions as assistant turns ending in <|im_end|>, a share of them the bare boxed answer.
    models/tiny-qwen2-chat (1.39M parameters; 1,200 SFT steps of 64 = 76,800 examples, half the answers bare)
    answers in the \\boxed{} format and ends its turn. models/tiny-qwen2-think's template opens <think> in the
    generation prompt (Qwen3-Thinking, DeepSeek-R1-Distill) and its turns reason inside the thought, close it, then
    box the answer (the bare answers: an empty thought); the same recipe. Built and shipped like the others; their
    accuracy before and after RL, and the cold starts tried: docs/real_models.md.
  * The Countdown model (CountdownRecipe, `--countdown`), shipped: models/tiny-qwen2-countdown (1.0M parameters,
    3.9 MB). Level 1 (three numbers, two steps), 800 SFT steps of 64 searches by attempt_trace (whole attempts,
    each checked beside its result; at most 8, a quarter of them a solution not yet tried), a warm-up / hold /
    linear-decay schedule; what it has learned and what GRPO adds: docs/countdown.md. Earlier builds, kept
    as fields: search_trace's searches of levels 1-3 ("search", 1,200 steps: 80-96 % of their claims of the target
    false, and GRPO lowered them) and solve_trace's ("guided").

Run:  python -m tools.tiny            # find (shipped or cached) or build the default tiny model; prints its path
      python -m tools.tiny --ship     # rebuild the default model from scratch and write it to models/tiny-qwen2/
      python -m tools.tiny --ship --tasks math+code   # the code model (math and code SFT) -> models/tiny-qwen2-code/
      python -m tools.tiny --ship --chat [--style think]   # the chat-shaped model -> models/tiny-qwen2-chat/ (-think/)
      python -m tools.tiny --ship --countdown          # the Countdown model -> models/tiny-qwen2-countdown/
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import time

import torch

import data
from tasks.addition import LEVELS, builtin_task
from tasks.piecewise import CODE_HEADER, builtin_code_task, partial_program
from tasks.templates import CODE_INSTRUCTION, INSTRUCTION, build_prompt
from tools.cli import ArgParser, cli

RECIPE_VERSION = 2  # bump when the build or SFT code changes in a way the fields below do not capture
SPECIALS = ["<|pad|>", "<|endoftext|>"]
CHARS = [chr(c) for c in range(32, 127)] + ["\n"]
WORDS = ["Question: ", "\n" + INSTRUCTION + "\nAnswer: ", "\\boxed{"]
# The code model's extra pieces: the code instruction, the built-in code task's fixed phrases and program lines
CODE_WORDS = ["\n" + CODE_INSTRUCTION + "\nAnswer: ", "Read n. Print ", "; if n", " print ", "```python\n",
              CODE_HEADER, "if n", ":r=", "print(r)\n```"]


@dataclasses.dataclass
class TinyRecipe:
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 512
    sft_steps: int = 900
    sft_batch: int = 64
    sft_lr: float = 3e-3
    sft_direct_frac: float = 0.7  # share of SFT targets that give the bare answer, without worked steps
    seed: int = 0
    tasks: str = "math"  # "math" (the built-in math task) or "math+code" (half the SFT examples from the built-in code task)
    sft_partial_frac: float = 0.5  # code: share of SFT programs with the base formula only (piecewise.partial_program)

    def words(self) -> list[str]:
        return WORDS + (CODE_WORDS if "code" in self.tasks else [])

    def key(self) -> str:
        """Changes when the recipe, the tokenizer or the task changes (not when a docstring does)."""
        task = [(e.prompt, e.solution) for e in builtin_task(8, "train", seed=123)]
        if "code" in self.tasks:
            task += [(e.prompt, e.solution, e.answer) for e in builtin_code_task(8, "train", seed=123)]
        blob = json.dumps([dataclasses.asdict(self), RECIPE_VERSION, SPECIALS, CHARS, self.words(), LEVELS, task],
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


CODE_RECIPE = TinyRecipe(tasks="math+code")  # the model for runs with a built-in code stage (shipped too)

# The Countdown model's extra pieces: the question's fixed phrases (tasks/countdown.py: question) and the search
# traces' (solve_trace, search_trace), each one token, as a real vocabulary would have them
COUNTDOWN_WORDS = ["\nAnswer: ", "Using the numbers [", "], create an equation that equals ",
                   ". You can use +, -, *, / and parentheses, and each number at most once (you do not have to use them "
                   "all). Give the final equation alone, without \"= ", "\", in <answer> </answer> tags, for example "
                   "<answer>(1 + 2) * 3</answer>.", "Target ", " from ", "\nTry ", ". Left: ", "\nCheck ", ". No ",
                   "\nBack to ", ". That is the target.", ". Not ", "\nSo ", "<answer>", "</answer>"]
SEARCH_WORDS = [", ", " = ", " + ", " - ", " * ", " / "]  # search_trace's steps' pieces, each one token


@dataclasses.dataclass
class CountdownRecipe:
    """A tiny model that searches on Countdown (tasks/countdown.py): cold-started on searches written out, so that its
    responses vary in length with the search and its choices are uncertain. Trace "attempts" (the shipped build,
    models/tiny-qwen2-countdown): attempt_trace's searches by whole attempts, each checked beside its result ("Try
    9 - 6 = 3, 10 + 3 = 13. Target 25: no."), `guided` of them a solution not yet tried; "search" / "search-cut":
    search_trace's step-by-step searches, which know nothing of the solution; "guided": solve_trace's (the earlier
    builds'). The character tokenizer of TinyRecipe plus COUNTDOWN_WORDS (and SEARCH_WORDS but for "guided"); plain
    prompts. Level 1 only by default: at 800 SFT steps its check is learned (docs/countdown.md), and levels 2-3 need
    longer SFT than a laptop build (~12 minutes on one core at level 1)."""
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 512
    positions: int = 1024  # prompt (~30 tokens) + the longest searches
    levels: str = "1"  # SFT problems' levels (tasks/countdown.py LEVELS): builtin-countdown's (tasks/load.py)
    max_tries: int = 3  # solve_trace's bound on the steps tried (level 3: up to ~450 tokens); trace "guided" only
    trace: str = "attempts"  # "attempts": attempt_trace; "search" / "search-cut": search_trace; "guided": solve_trace
    max_attempts: int = 8  # attempt_trace's bound on a search's attempts (trace "attempts")
    guided: float = 0.25  # attempt_trace's chance that an attempt is a solution not yet tried (trace "attempts")
    sft_tokens: int = 480  # "search": an SFT search longer than this many tokens is drawn again (up to 8 draws);
    # "search-cut": it is cut there, as the length limit cuts a sampled one (no answer, no EOS)
    sft_steps: int = 800  # level 1: the check is learned at 800 (0.92 / 0.02 given), not at 400 (0.74 / 0.13)
    sft_batch: int = 64
    sft_micro: int = 16  # each step's 64 searches as 4 micro-batches of like lengths: the same gradient, less padding
    sft_problems: int = 1000  # distinct training problems the SFT searches (level 1 has 1,250)
    sft_lr: float = 3e-3
    schedule: str = "wsd"  # "wsd": warm-up over 5 %, held to 70 % of the steps, then linear toward 0 (floor 2 %); "cosine"
    seed: int = 0
    name = "tiny-qwen2-countdown"

    def words(self) -> list[str]:
        return WORDS[:1] + COUNTDOWN_WORDS + (SEARCH_WORDS if self.trace != "guided" else [])

    def search(self, problem: dict, rng: random.Random, max_chars: int | None = None) -> str | None:
        from tasks.countdown import attempt_trace, search_trace, solve_trace

        if self.trace == "attempts":
            return attempt_trace(problem, rng, self.max_attempts, self.guided)
        if self.trace in ("search", "search-cut"):
            return search_trace(problem, rng, max_chars, cut=self.trace == "search-cut")
        return solve_trace(problem, rng, self.max_tries)

    def level_list(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.levels.split(","))

    def key(self) -> str:
        from tasks.countdown import LEVELS as CD_LEVELS, countdown_task

        task = [(e.prompt, self.search(e.answer, random.Random(0))) for e in countdown_task(8, "train", 123)]
        blob = json.dumps([dataclasses.asdict(self), RECIPE_VERSION, SPECIALS, CHARS, self.words(),
                           {k: dataclasses.astuple(v) for k, v in CD_LEVELS.items()}, task], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


COUNTDOWN_RECIPE = CountdownRecipe()  # the model for --reward countdown runs


def countdown_sft(model, tokenizer, recipe: CountdownRecipe, log_every: int = 100) -> None:
    """Cold start on Countdown: each SFT target is one search for a training problem (recipe.search, its own draw).
    `sft_problems` distinct problems (level 1 has only a few thousand), each searched afresh every time it recurs.
    With search_trace, a search longer than `sft_tokens` is drawn again in another order, up to 8 draws, and a problem
    none of whose draws fits gives its place to the next one: a search cut short would teach no ending, and the SFT
    searches are so the ones that fit the length limit RL will sample under (the luckier orders of the hard levels)."""
    from tasks.countdown import countdown_task

    rng = random.Random(recipe.seed)
    problems = countdown_task(recipe.sft_problems, "train", recipe.seed + 1, levels=recipe.level_list())
    order, pool = [], []
    while recipe.trace == "attempts" and len(pool) < recipe.sft_steps * recipe.sft_batch:  # a problem at random each
        ex = dataclasses.replace(problems[rng.randrange(len(problems))])  # time (None: no hit in max_attempts)
        ex.solution = recipe.search(ex.answer, rng)
        if ex.solution is not None:
            pool.append(ex)
    if recipe.trace != "attempts":
        order = [dataclasses.replace(problems[i % len(problems)]) for i in range(recipe.sft_steps * recipe.sft_batch)]
    rng.shuffle(order)
    n = 0
    while recipe.trace == "search-cut" and len(pool) < len(order):
        ex = order[len(pool)]
        ex.solution = recipe.search(ex.answer, rng, 3 * recipe.sft_tokens)
        enc = tokenizer(ex.solution, add_special_tokens=False, return_offsets_mapping=True)
        if len(enc["input_ids"]) > recipe.sft_tokens:  # whole lines up to the token budget
            ex.solution = ex.solution[: ex.solution.rfind("\n", 0, enc["offset_mapping"][recipe.sft_tokens][0])]
        ex.meta = {**ex.meta, "cut": "<answer>" not in ex.solution}
        pool.append(ex)
    while len(pool) < len(order):
        ex = dataclasses.replace(order[n % len(order)])
        n += 1
        for _ in range(8 if recipe.trace == "search" else 1):  # 3 characters a token at most: abandoned past that
            ex.solution = recipe.search(ex.answer, rng, 3 * recipe.sft_tokens)
            if ex.solution is not None and (recipe.trace != "search" or len(ex.solution) < 1.5 * recipe.sft_tokens or len(
                    tokenizer(ex.solution, add_special_tokens=False)["input_ids"]) <= recipe.sft_tokens):
                pool.append(ex)
                break
    b, m = recipe.sft_batch, recipe.sft_micro

    def micro_batches(step):  # the step's searches sorted by length, cut into micro-batches of m
        rows = sorted(pool[step * b : (step + 1) * b], key=lambda ex: len(ex.solution))
        return [sft_batch(tokenizer, rows[i : i + m]) for i in range(0, len(rows), m)]
    fit(model, recipe, micro_batches, log_every)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-character map used by byte-level BPE (Qwen2's tokenizer included)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def build_tokenizer(words: list[str] = WORDS, max_length: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # Byte-level symbols (' ' -> 'Ġ', '\n' -> 'Ċ'), as Qwen2's tokenizer expects: transformers loads any qwen2
    # checkpoint's tokenizer as Qwen2Tokenizer, whose byte-level pre-tokenizer would drop raw spaces otherwise.
    b2u = bytes_to_unicode()
    vocab = {t: i for i, t in enumerate(SPECIALS + ["".join(b2u[b] for b in c.encode()) for c in CHARS])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))  # no merges: one token per character
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|endoftext|>", padding_side="left", model_max_length=max_length
    )
    # A real BPE vocabulary compresses the fixed template to a few tokens; with characters alone it would be
    # ~90 of a ~130-token sequence and triple the cost of every step. These pieces are ordinary (non-special)
    # tokens: the text is unchanged, only its tokenization is shorter.
    hf.add_tokens(words)
    return hf


def build_model(recipe: TinyRecipe, tokenizer):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=128,  # >= len(tokenizer); a multiple of 64 keeps kernels happy
        hidden_size=recipe.hidden,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.kv_heads,
        intermediate_size=recipe.intermediate,
        max_position_embeddings=getattr(recipe, "positions", 512),
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(recipe.seed)
    return Qwen2ForCausalLM(cfg)


def sft_batch(tokenizer, examples: list[data.Example]):
    """Left-padded (prompt + worked solution + EOS) with labels -100 everywhere but the response."""
    ids, labels = [], []
    for ex in examples:
        kind = ex.meta.get("kind") if ex.meta.get("kind") in ("code", "countdown") else "math"
        p = tokenizer(build_prompt(tokenizer, ex.prompt, kind), add_special_tokens=False)["input_ids"]
        r = tokenizer(ex.solution, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] * (not ex.meta.get("cut"))
        ids.append(p + r)
        labels.append([-100] * len(p) + r)
    T = max(map(len, ids))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (T - len(x)) + x for x in ids])
    lab = torch.tensor([[-100] * (T - len(x)) + x for x in labels])
    return input_ids, (input_ids != pad).long(), lab


def sft(model, tokenizer, recipe, log_every: int = 100) -> None:
    """Cold-start SFT: AdamW, linear warm-up then cosine decay (CountdownRecipe: its `schedule`), completion-only
    cross-entropy."""
    if isinstance(recipe, ChatRecipe):
        return chat_sft(model, tokenizer, recipe, log_every)
    if isinstance(recipe, CountdownRecipe):
        return countdown_sft(model, tokenizer, recipe, log_every)
    rng = random.Random(recipe.seed)
    n = recipe.sft_steps * recipe.sft_batch
    if "code" not in recipe.tasks:
        pool = builtin_task(n, split="train", seed=recipe.seed + 1)
    else:  # half math, half code, shuffled together
        pool = builtin_task(n // 2, split="train", seed=recipe.seed + 1) + builtin_code_task(n - n // 2, "train", recipe.seed + 1)
    rng.shuffle(pool)
    for ex in pool:
        if ex.meta.get("kind") == "code":
            if rng.random() < recipe.sft_partial_frac:
                ex.solution = partial_program(ex)
        elif rng.random() < recipe.sft_direct_frac:
            ex.solution = f"\\boxed{{{ex.answer}}}"
    fit(model, recipe, lambda step: sft_batch(tokenizer, pool[step * recipe.sft_batch : (step + 1) * recipe.sft_batch]),
        log_every)


def accumulate(model, micro_batches) -> torch.Tensor:
    """Backward of the mean cross-entropy over every target token of `micro_batches` ((input_ids, attention_mask,
    labels) each), one micro-batch at a time: the gradient of the batch they make together, without its padding."""
    total = sum(int((labels[:, 1:] != -100).sum()) for _, _, labels in micro_batches)
    loss = torch.zeros(())
    for input_ids, attn, labels in micro_batches:
        logits = model(input_ids=input_ids, attention_mask=attn).logits[:, :-1]
        part = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels[:, 1:].flatten(),
                                                 ignore_index=-100, reduction="sum") / total
        part.backward()
        loss = loss + part.detach().cpu()
    return loss


def fit(model, recipe, batch_of, log_every: int = 100) -> None:
    """The SFT loop: `batch_of(step)` gives (input_ids, attention_mask, labels[, position_ids])."""
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.sft_lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, recipe.sft_steps // 20)
    model.train()
    t0 = time.time()
    for step in range(recipe.sft_steps):
        if getattr(recipe, "schedule", "cosine") == "wsd":  # warm-up, stable, then a linear decay (CountdownRecipe)
            decay = 1.0 if step < 0.7 * recipe.sft_steps else max(0.02, (recipe.sft_steps - step) / (0.3 * recipe.sft_steps))
        else:
            decay = 0.5 * (1 + math.cos(math.pi * step / recipe.sft_steps))
        lr = recipe.sft_lr * min(1.0, (step + 1) / warm) * decay
        for g in opt.param_groups:
            g["lr"] = lr
        batch = batch_of(step)
        if isinstance(batch, list):  # micro-batches: the loss of their tokens together, as one batch would give
            opt.zero_grad(set_to_none=True)
            loss = accumulate(model, batch)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if log_every and (step % log_every == 0 or step == recipe.sft_steps - 1):
                print(f"[tiny] sft step {step:5d}/{recipe.sft_steps}  loss {float(loss):.4f}  ({time.time() - t0:.0f}s)", flush=True)
            continue
        input_ids, attn, labels, *pos = batch
        if pos:  # the LM head on the target positions only (a few thousand vocabulary rows: most of the cost)
            h = model.model(input_ids=input_ids, attention_mask=attn, position_ids=pos[0]).last_hidden_state
            target = labels[:, 1:] != -100
            loss = torch.nn.functional.cross_entropy(model.lm_head(h[:, :-1][target]).float(), labels[:, 1:][target])
        else:
            loss = model(input_ids=input_ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if log_every and (step % log_every == 0 or step == recipe.sft_steps - 1):
            print(f"[tiny] sft step {step:5d}/{recipe.sft_steps}  loss {loss.item():.4f}  ({time.time() - t0:.0f}s)", flush=True)
    model.eval()


# ------------------------------------------------------------------------------------------------
# The chat-shaped tiny models: Qwen2.5's tokenizer conventions, chat template and stop rules
# ------------------------------------------------------------------------------------------------
CHAT_SYSTEM = "You are a helpful assistant."  # the default system turn (Qwen2's; Qwen2.5 adds "You are Qwen, ...")
CHAT_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # Qwen2.5's three, in its order
THINK_TOKENS = ["<think>", "</think>"]  # added but not special (Qwen3, R1-Distill): decoded text keeps them
# Qwen2's pre-tokenizer (its tokenizer.json): words with their leading space, each digit alone, punctuation runs
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
_TURNS = ("{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
          "{%- else %}{{- '<|im_start|>system\\n" + CHAT_SYSTEM + "<|im_end|>\\n' }}{%- endif %}"
          "{%- for message in messages %}{%- if message.role != 'system' %}"
          "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}")
CHAT_TEMPLATE = _TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"  # Qwen2.5's, no tools
# The thinking variant's generation prompt opens the thought (Qwen3-Thinking, DeepSeek-R1-Distill): the response
# starts inside <think> and must close it before its answer.
THINK_TEMPLATE = _TURNS + "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
# The BPE tokenizer's training text: the project's README and docs as they were when the chat models were first
# built, frozen in the repository so that the tokenizer (and so the model) is rebuilt bit for bit whatever the docs
# say today; plus the built-in task's own text (ChatRecipe.corpus).
CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "bpe-corpus.txt.gz")


@dataclasses.dataclass
class ChatRecipe:
    """A chat-shaped tiny model: byte-level BPE, Qwen2.5's special tokens and template, cold-started on chat data.

    style 'chat': responses are the built-in task's solutions, "17+5=22 22+3=25 \\boxed{25}", or (sft_direct_frac
    of them) the bare "\\boxed{25}". style 'think': the template opens <think>, and the same two kinds of response
    reason inside the thought and answer after it: "17+5=22 22+3=25\\n</think>\\n\\n\\boxed{25}", or an empty
    thought "\\n</think>\\n\\n\\boxed{25}" (Qwen3's non-thinking form). Every response ends with <|im_end|>."""
    style: str = "chat"  # 'chat' or 'think'
    vocab: int = 3072  # BPE vocabulary (256 bytes + specials + merges), before <think> </think>
    hidden: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 512
    sft_steps: int = 1200
    sft_batch: int = 64
    sft_lr: float = 3e-3
    sft_direct_frac: float = 0.5
    seed: int = 0

    @property
    def name(self) -> str:
        return "tiny-qwen2-" + self.style

    def corpus(self) -> list[str]:
        import gzip

        with open(CORPUS, "rb") as f:
            docs = gzip.decompress(f.read()).decode()
        # the task's conversations (both styles), so that the template's words are single tokens, as in a real vocabulary
        task = [f"<|im_start|>system\n{CHAT_SYSTEM}<|im_end|>\n<|im_start|>user\n{ex.prompt}\n{INSTRUCTION}<|im_end|>\n"
                f"<|im_start|>assistant\n<think>\n{chat_response(ex, k % 2, ('chat', 'think')[k // 2])}<|im_end|>\n"
                for ex in builtin_task(500, "train", seed=99) for k in range(4)]
        return [docs, *task]

    def key(self) -> str:
        import gzip

        with open(CORPUS, "rb") as f:
            corpus = hashlib.sha256(gzip.decompress(f.read())).hexdigest()
        task = [(e.prompt, e.solution) for e in builtin_task(8, "train", seed=123)]
        blob = json.dumps([dataclasses.asdict(self), RECIPE_VERSION, CHAT_SPECIALS, THINK_TOKENS, QWEN2_SPLIT, CHAT_TEMPLATE,
                           THINK_TEMPLATE, INSTRUCTION, LEVELS, task, corpus], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


CHAT_RECIPE = ChatRecipe()  # shipped: models/tiny-qwen2-chat
THINK_RECIPE = ChatRecipe(style="think")  # shipped: models/tiny-qwen2-think, the same cold start in the thinking form


def chat_response(ex: data.Example, direct: bool, style: str) -> str:
    """The assistant turn's text (without <|im_end|>) for `ex`: worked steps or the bare answer, in `style`."""
    steps = ex.solution.rsplit(" \\boxed{", 1)[0]
    box = f"\\boxed{{{ex.answer}}}"
    if style == "think":
        return ("" if direct else steps) + "\n</think>\n\n" + box
    return box if direct else f"{steps} {box}"


def build_chat_tokenizer(recipe: ChatRecipe):
    """A byte-level BPE tokenizer trained here (Qwen2's pre-tokenizer and NFC normaliser), with Qwen2.5's special
    tokens and conventions: EOS and pad <|endoftext|>, turns <|im_start|> ... <|im_end|>, no BOS; <think> </think>
    as added non-special tokens; the recipe's chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False)])
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=recipe.vocab, show_progress=False, special_tokens=CHAT_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(recipe.corpus(), trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                  model_max_length=512)
    tok.add_special_tokens({"additional_special_tokens": CHAT_SPECIALS[1:]})
    tok.add_tokens(THINK_TOKENS)  # special=False: skip_special_tokens keeps them, as the reward must see </think>
    tok.chat_template = THINK_TEMPLATE if recipe.style == "think" else CHAT_TEMPLATE
    return tok


def build_chat_model(recipe: ChatRecipe, tokenizer):
    """A randomly initialised Qwen2ForCausalLM whose config and generation_config follow Qwen2.5-Instruct's: config
    EOS <|endoftext|>, generation_config EOS [<|im_end|>, <|endoftext|>] and its sampling defaults (which every
    engine here switches off), an embedding with more rows than the tokenizer has tokens."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    eos, im_end = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    cfg = Qwen2Config(
        vocab_size=-(-len(tokenizer) // 64) * 64, hidden_size=recipe.hidden, num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads, num_key_value_heads=recipe.kv_heads, intermediate_size=recipe.intermediate,
        max_position_embeddings=512, tie_word_embeddings=True, pad_token_id=eos, eos_token_id=eos, bos_token_id=eos,
    )
    torch.manual_seed(recipe.seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(bos_token_id=eos, pad_token_id=eos, eos_token_id=[im_end, eos],
                                               do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05)
    return model


def chat_sft_batch(tokenizer, prompts: list[str], responses: list[str]):
    """Left-padded (prompt + response + <|im_end|>) rows, labels -100 outside the response and its <|im_end|> (the
    template, the system and user turns are never targets), position ids counting real tokens (as generation)."""
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids, labels = [], []
    for p, r in zip(prompts, responses):
        p = tokenizer(p, add_special_tokens=False)["input_ids"]
        r = tokenizer(r, add_special_tokens=False)["input_ids"] + [im_end]
        ids.append(p + r)
        labels.append([-100] * len(p) + r)
    T = max(map(len, ids))
    input_ids = torch.tensor([[tokenizer.pad_token_id] * (T - len(x)) + x for x in ids])
    attn = torch.tensor([[0] * (T - len(x)) + [1] * len(x) for x in ids])
    lab = torch.tensor([[-100] * (T - len(x)) + x for x in labels])
    return input_ids, attn, lab, (attn.cumsum(-1) - 1).clamp(min=0)


def chat_sft_data(tokenizer, recipe: ChatRecipe) -> tuple[list[str], list[str]]:
    """(prompt, response) pairs: the built-in task's training problems in the chat template (the default system turn,
    the question and the \\boxed{} instruction as the user turn), sft_direct_frac of the answers bare."""
    rng = random.Random(recipe.seed)
    pool = builtin_task(recipe.sft_steps * recipe.sft_batch, split="train", seed=recipe.seed + 1)
    prompts = [build_prompt(tokenizer, ex.prompt, "math", "chat") for ex in pool]
    return prompts, [chat_response(ex, rng.random() < recipe.sft_direct_frac, recipe.style) for ex in pool]


def chat_sft(model, tokenizer, recipe: ChatRecipe, log_every: int = 100) -> None:
    prompts, responses = chat_sft_data(tokenizer, recipe)
    b = recipe.sft_batch
    fit(model, recipe, lambda step: chat_sft_batch(tokenizer, prompts[step * b : (step + 1) * b], responses[step * b : (step + 1) * b]),
        log_every)


def default_dir() -> str:
    root = os.environ.get("TINY_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "grpo-recipes"))
    return root


SHIPPED_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "tiny-qwen2")
SHIPPED_CODE_DIR = SHIPPED_DIR + "-code"  # CODE_RECIPE's model


def shipped_dir(recipe) -> str:
    if isinstance(recipe, (ChatRecipe, CountdownRecipe)):
        return os.path.join(os.path.dirname(SHIPPED_DIR), recipe.name)
    return SHIPPED_CODE_DIR if "code" in recipe.tasks else SHIPPED_DIR


def builtin_paths() -> list[str]:
    """Where `train.py --model ''` may resolve to (shipped or cached: math, math + code, Countdown), without building."""
    return [d for r in (TinyRecipe(), CODE_RECIPE, COUNTDOWN_RECIPE)
            for d in (shipped_dir(r), cache_path(r))]


def shipped_key(path: str = SHIPPED_DIR) -> str | None:
    """Recipe key of the model shipped in the repository at `path` (None if there is none)."""
    try:
        with open(os.path.join(path, "recipe.json")) as f:
            return json.load(f).get("key")
    except (OSError, ValueError):
        return None


def cache_path(recipe, cache_dir: str | None = None) -> str:
    named = isinstance(recipe, (ChatRecipe, CountdownRecipe))
    return os.path.join(cache_dir or default_dir(), f"{recipe.name if named else 'tiny-qwen2'}-{recipe.key()}")


def find_tiny_model(recipe, cache_dir: str | None = None, use_shipped: bool = True) -> str | None:
    """The shipped model of `recipe` when it was built from it, else its cached build, else None (nothing is built)."""
    if use_shipped and shipped_key(shipped_dir(recipe)) == recipe.key():
        return shipped_dir(recipe)
    path = cache_path(recipe, cache_dir)
    return path if os.path.exists(os.path.join(path, "recipe.json")) else None


def get_tiny_model(recipe: TinyRecipe | ChatRecipe | CountdownRecipe | None = None, cache_dir: str | None = None, verbose: bool = True,
                   use_shipped: bool = True) -> str:
    """Path of a saved tiny model for `recipe`: the shipped one when it was built from this recipe, else the cached
    one, else built now (tokenizer, model, SFT) and cached."""
    recipe = recipe or TinyRecipe()
    found = find_tiny_model(recipe, cache_dir, use_shipped)
    if found:
        return found
    chat = isinstance(recipe, ChatRecipe)
    path = cache_path(recipe, cache_dir)
    if verbose:
        print(f"[tiny] building the tiny model (one time, cached at {path})", flush=True)
    tok = build_chat_tokenizer(recipe) if chat else build_tokenizer(recipe.words(), getattr(recipe, "positions", 512))
    model = build_chat_model(recipe, tok) if chat else build_model(recipe, tok)
    sft(model, tok, recipe, log_every=100 if verbose else 0)
    tmp = path + f".tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    with open(os.path.join(tmp, "recipe.json"), "w") as f:  # written last: marks the directory complete
        json.dump({**dataclasses.asdict(recipe), "key": recipe.key()}, f, indent=1)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    return path


def main(argv=None):
    """The command line: build (or --ship) a tiny model from a recipe's settings."""
    import data
    from trainer.checks import above, at_least, number, within

    ap = ArgParser(prog="-m tools.tiny", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    fields = {f.name: f for f in dataclasses.fields(TinyRecipe) + dataclasses.fields(ChatRecipe) +
              dataclasses.fields(CountdownRecipe)}
    for f in fields.values():  # unset: the recipe's default (TinyRecipe's, or ChatRecipe's with --chat)
        typ = type(f.default)  # sizes and steps >= 1, the seed >= 0, the lr > 0, fractions in [0, 1]
        if f.name == "trace":
            ap.add_argument("--trace", default=None, choices=("attempts", "search", "search-cut", "guided"), help="--countdown: "
                            "the SFT searches: attempt_trace's (whole attempts, each checked; --max-attempts, --guided), "
                            "search_trace's (no knowledge of the solution; those longer than --sft-tokens drawn again, "
                            "or cut there) or solve_trace's (guided to it)")
            continue
        if f.name == "schedule":
            ap.add_argument("--schedule", default=None, choices=("wsd", "cosine"), help="--countdown: the SFT learning "
                            "rate's schedule after its warm-up")
            continue
        if typ is str and f.name == "levels":
            ap.add_argument("--levels", default=None, help="--countdown: the SFT problems' levels, e.g. 1,2")
            continue
        check = {int: at_least(0) if f.name == "seed" else at_least(1),
                 float: within(0, 1) if f.name.endswith("_frac") or f.name == "guided" else above(0)}.get(typ)
        ap.add_argument("--" + f.name.replace("_", "-"), type=number(typ, check) if check else typ, default=None)
    ap.add_argument("--chat", action="store_true", help="the chat-shaped model (ChatRecipe; --style chat or think)")
    ap.add_argument("--countdown", action="store_true", help="the Countdown model (CountdownRecipe) -> "
                                                            "models/tiny-qwen2-countdown with --ship")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--ship", action="store_true", help=f"rebuild from scratch and write the result to {SHIPPED_DIR} "
                                                       f"(--tasks math+code: {SHIPPED_CODE_DIR}; --chat: models/tiny-qwen2-STYLE)")
    a = vars(ap.parse_args(argv))
    cache, ship, chat, countdown = a.pop("cache_dir"), a.pop("ship"), a.pop("chat"), a.pop("countdown")
    if chat and countdown:
        raise SystemExit("error: --chat and --countdown: one model at a time")
    kind = ChatRecipe if chat else CountdownRecipe if countdown else TinyRecipe
    if a.get("levels") is not None:
        from tasks.countdown import LEVELS as CD_LEVELS

        if not all(x.strip().isdigit() and int(x) in CD_LEVELS for x in a["levels"].split(",")):
            raise SystemExit(f"error: --levels {a['levels']}: comma-separated levels of {sorted(CD_LEVELS)}")
    given = {k: v for k, v in a.items() if v is not None}
    if set(given) - {f.name for f in dataclasses.fields(kind)}:
        raise SystemExit(f"error: {', '.join('--' + k.replace('_', '-') for k in sorted(set(given) - {f.name for f in dataclasses.fields(kind)}))}: "
                         f"not a setting of {kind.__name__}" + ("" if chat else " (add --chat)"))
    a = given
    if chat:  # each style's shipped recipe, with the settings given on the command line changed
        base = THINK_RECIPE if a.get("style") == "think" else CHAT_RECIPE
        a = {**dataclasses.asdict(base), **a}
    torch.set_num_threads(1)  # see train.py --threads: one SFT step took 0.46 s on 1 thread, 4.8 s on 2 (measured here)
    if ship:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            recipe = kind(**a)
            built = get_tiny_model(recipe, tmp, use_shipped=False)
            shutil.rmtree(shipped_dir(recipe), ignore_errors=True)
            shutil.copytree(built, shipped_dir(recipe))
        print(shipped_dir(recipe))
    else:
        print(get_tiny_model(kind(**a), cache))


if __name__ == "__main__":
    import sys

    import data

    sys.exit(cli(main))
