"""Real-shaped stand-ins for Hugging Face models, built offline: what the example runs are rehearsed on.

No weights can be downloaded where this project is tested, so each example run (examples/*.sh) is rehearsed on a
model that has the real model's *interface* with random weights:

  * a byte-level BPE tokenizer trained here with `tokenizers` (a few thousand merges on the project's own text: a
    frozen copy of its README and docs, models/bpe-corpus.txt.gz, and the built-in task), carrying the real special
    tokens, chat template and EOS conventions;
  * the real architecture class and vocabulary size (Qwen2: 151,936 rows; Llama-3: 128,256) at 2 small layers, so
    the model's vocabulary is larger than its tokenizer, as Qwen2.5's is (151,936 rows, 151,665 tokens);
  * a generation_config.json with the real models' EOS lists and sampling defaults (Qwen2.5-Instruct ships
    top_k 20, top_p 0.8, repetition_penalty 1.05, temperature 0.7, which every engine here must switch off).

Kinds (what each imitates):
  qwen2.5-base      tokenizer EOS <|endoftext|>, chat turns end with <|im_end|>, generation_config EOS <|endoftext|>
                    only (Qwen2.5 / Qwen2.5-Math base): generation must still stop at <|im_end|>
  qwen2.5-instruct  tokenizer EOS <|im_end|>, generation_config EOS [<|im_end|>, <|endoftext|>], sampling defaults
  llama3-instruct   the tokenizer adds <|begin_of_text|> itself, no pad token, EOS <|end_of_text|>, turns end with
                    <|eot_id|>, generation_config EOS [<|end_of_text|>, <|eom_id|>, <|eot_id|>]
  r1-distill-qwen   DeepSeek-R1-Distill-Qwen: EOS <｜end▁of▁sentence｜>, the tokenizer adds <｜begin▁of▁sentence｜>, and
                    the chat template's generation prompt opens the thought (<｜Assistant｜><think>\n): responses
                    hold </think> and never <think>
  qwen3             Qwen3 (hybrid thinking): ChatML, EOS <|im_end|>; the model writes <think> itself, and the template
                    switch enable_thinking=false writes an empty closed thought into the prompt

The weights are random except for one choice that makes the stand-ins behave like a chat model in length: every
embedding row has a constant first coordinate, so the final hidden state always has a large positive first
coordinate, and the LM head reads it as a bias (`BIAS`): tokens the tokenizer knows are likely, the end-of-turn
token comes with probability ~5% per token (measured: mean response 18.6 tokens, 1.6% reach 64), and one id beyond
the tokenizer (a padded embedding row) is 2.8% of sampled tokens, so every run meets the larger-vocabulary case.

    python examples/standins.py --kind qwen2.5-base --out /tmp/qwen-standin
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

QWEN_CHAT_TEMPLATE = (  # Qwen2.5's ChatML template without its tool-calling branches
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- for message in messages %}{%- if message.role != 'system' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
LLAMA3_CHAT_TEMPLATE = (  # Llama-3.x instruct's template without its tool-calling and date branches
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")

R1_DISTILL_CHAT_TEMPLATE = (  # DeepSeek-R1-Distill-Qwen's template without its tool branches: the generation prompt
    # opens the thought, so responses hold </think> and never <think>
    "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] == 'user' %}{{- '<｜User｜>' + message['content'] }}"
    "{%- elif message['role'] == 'assistant' %}{{- '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<｜Assistant｜><think>\\n' }}{%- endif %}")
QWEN3_CHAT_TEMPLATE = (  # Qwen3's (hybrid thinking) template without its tool and history-stripping branches
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}")

KINDS = {
    "qwen2.5-base": dict(family="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], eos="<|endoftext|>",
                         pad="<|endoftext|>", bos=None, end_of_turn="<|im_end|>", template=QWEN_CHAT_TEMPLATE,
                         gen_eos=["<|endoftext|>"], sampling={}),
    "qwen2.5-instruct": dict(family="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], eos="<|im_end|>",
                             pad="<|endoftext|>", bos=None, end_of_turn="<|im_end|>", template=QWEN_CHAT_TEMPLATE,
                             gen_eos=["<|im_end|>", "<|endoftext|>"],
                             sampling=dict(do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.05)),
    "llama3-instruct": dict(family="llama", specials=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                                      "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>"],
                            eos="<|eot_id|>", pad=None, bos="<|begin_of_text|>", end_of_turn="<|eot_id|>",
                            template=LLAMA3_CHAT_TEMPLATE, gen_eos=["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"],
                            sampling=dict(do_sample=True, temperature=0.6, top_p=0.9)),
    # <think> / </think> are added tokens that are not special (as in the real tokenizers): decoding keeps them
    "r1-distill-qwen": dict(family="qwen2", specials=["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>",
                                                      "<｜Assistant｜>"], thinking=["<think>", "</think>"],
                            eos="<｜end▁of▁sentence｜>", pad="<｜end▁of▁sentence｜>", bos="<｜begin▁of▁sentence｜>",
                            end_of_turn="<｜end▁of▁sentence｜>", template=R1_DISTILL_CHAT_TEMPLATE,
                            gen_eos=["<｜end▁of▁sentence｜>"], sampling=dict(do_sample=True, temperature=0.6, top_p=0.95)),
    "qwen3": dict(family="qwen3", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], thinking=["<think>", "</think>"],
                  eos="<|im_end|>", pad="<|endoftext|>", bos=None, end_of_turn="<|im_end|>", template=QWEN3_CHAT_TEMPLATE,
                  gen_eos=["<|im_end|>", "<|endoftext|>"],
                  sampling=dict(do_sample=True, temperature=0.6, top_p=0.95, top_k=20)),
}
VOCAB = {"qwen2": 151_936, "qwen3": 151_936, "llama": 128_256}  # the real models' embedding rows
BIAS = {"known": 10.0, "end_of_turn": 15.5, "padded": 14.8}  # logit offsets (module docstring)


def corpus() -> list[str]:
    """Text the project has: its docs as frozen in models/bpe-corpus.txt.gz (tools/tiny.py's; the docs of today would
    make every edit of them a new tokenizer, and so new samples in course/07's committed outputs) and the built-in
    task's worked solutions."""
    import gzip

    from tasks.addition import builtin_task

    with open(os.path.join(ROOT, "models", "bpe-corpus.txt.gz"), "rb") as f:
        texts = [gzip.decompress(f.read()).decode()]
    texts += [f"{ex.prompt}\n{ex.meta.get('solution', '')} \\boxed{{{ex.answer}}}" for ex in builtin_task(3000, "train")]
    return texts


def build_tokenizer(kind: str, vocab_size: int = 4000):
    """A byte-level BPE tokenizer trained on `corpus()`, with `kind`'s special tokens, EOS / pad / BOS and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    spec = KINDS[kind]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=spec["specials"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(corpus(), trainer)
    if spec["bos"]:  # Llama-3: the tokenizer itself puts BOS in front of every encoded text
        tk.post_processor = processors.TemplateProcessing(single=f"{spec['bos']} $A", pair=f"{spec['bos']} $A $B",
                                                          special_tokens=[(spec["bos"], tk.token_to_id(spec["bos"]))])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=spec["eos"], pad_token=spec["pad"], bos_token=spec["bos"],
                                  model_max_length=32768)
    tok.add_special_tokens({"additional_special_tokens": [t for t in spec["specials"] if t not in (spec["eos"], spec["pad"], spec["bos"])]})
    tok.add_tokens(spec.get("thinking", []))  # not special: kept by decode(skip_special_tokens=True), as the real ones
    tok.chat_template = spec["template"]
    return tok


def build_model(kind: str, tokenizer, layers: int = 2, hidden: int = 64, seed: int = 0):
    """The real architecture at the real vocabulary size, `layers` small layers, biased as the module docstring says."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    spec = KINDS[kind]
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in spec["specials"]}
    common = dict(vocab_size=VOCAB[spec["family"]], hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                  num_key_value_heads=1, intermediate_size=2 * hidden, max_position_embeddings=4096,
                  tie_word_embeddings=False, eos_token_id=ids[spec["eos"]],
                  bos_token_id=ids[spec["bos"]] if spec["bos"] else None,
                  pad_token_id=ids[spec["pad"]] if spec["pad"] else None)
    torch.manual_seed(seed)
    if spec["family"] == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(**common, head_dim=hidden // 2))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**common)) if spec["family"] == "qwen2" else LlamaForCausalLM(LlamaConfig(**common))
    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = 3.0  # the constant coordinate the LM head reads as a bias
        head = model.get_output_embeddings().weight
        scale = 3.0 / (3.0**2 / hidden) ** 0.5  # the final RMSNorm's output in that coordinate, ~ sqrt(hidden)
        head[:, 0] = 0.0
        head[: len(tokenizer), 0] = BIAS["known"] / scale
        head[ids[spec["end_of_turn"]], 0] = BIAS["end_of_turn"] / scale
        head[padded_id(model), 0] = BIAS["padded"] / scale
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        eos_token_id=[ids[t] for t in spec["gen_eos"]] if len(spec["gen_eos"]) > 1 else ids[spec["gen_eos"][0]],
        bos_token_id=common["bos_token_id"], pad_token_id=common["pad_token_id"], **spec["sampling"])
    return model


def padded_id(model) -> int:
    """The one id beyond the tokenizer the stand-in samples now and then: the last embedding row."""
    return model.config.vocab_size - 1


def build(kind: str, out: str, seed: int = 0) -> str:
    """Write the stand-in of `kind` to `out` (save_pretrained: config, weights, tokenizer, generation_config)."""
    if kind not in KINDS:
        raise SystemExit(f"error: --kind {kind!r}: not one of {', '.join(KINDS)}")
    tok = build_tokenizer(kind)
    model = build_model(kind, tok, seed=seed)
    tmp = out + f".tmp{os.getpid()}"
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    with open(os.path.join(tmp, "standin.json"), "w") as f:  # written last: marks the directory complete
        json.dump({"kind": kind, "seed": seed, "imitates": kind, "random_weights": True}, f)
    if os.path.exists(out):
        import shutil

        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", default="qwen2.5-base", help=f"one of {', '.join(KINDS)}")
    ap.add_argument("--out", required=True, help="directory to write")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    print(build(a.kind, a.out, a.seed))


if __name__ == "__main__":
    main()
