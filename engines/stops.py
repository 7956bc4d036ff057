"""Where a response ends, one rule for every engine (`stop_token_ids`, `finish`): at the first stop token (the
tokenizer's EOS, every id of the model's generation_config.eos_token_id, and the chat template's end-of-turn token when
it is a special token: a Qwen2.5 base model's EOS is <|endoftext|> but its turns end with <|im_end|>), or right after
the token that completes a stop string (`SamplingParams.stop`, e.g. "</answer>"; the string is kept, as vLLM's
include_stop_str_in_output). The stop token stays in `token_ids`; `truncated` is True when neither came within
`max_new_tokens`; `length` counts the response tokens including the stop token (what DAPO's length penalty uses). A
stop string that ends inside a token keeps the whole token: the tokens the trainer scores are exactly the ones
sampled, and the text may run a few characters past the string. `read_stops` reads --stop's strings.
"""
from __future__ import annotations

import os
import re

from engines.base import Completion


def end_of_turn_id(tokenizer) -> int | None:
    """The special token the chat template closes an assistant turn with (<|im_end|>, <|eot_id|>), if any."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    mark = "zqxv"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "a"}, {"role": "assistant", "content": mark}],
                                             tokenize=False)
    except Exception:  # a template that refuses this conversation names no end of turn
        return None
    tail = text[text.rindex(mark) + len(mark):] if mark in text else ""
    ids = tokenizer(tail.lstrip(" "), add_special_tokens=False)["input_ids"]
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return ids[0] if ids and ids[0] in added and added[ids[0]].special else None


def stop_token_ids(tokenizer, generation_config=None) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS, the model's generation_config.eos_token_id (an int or a
    list: instruct models list several), and the chat template's end-of-turn token."""
    ids = [tokenizer.eos_token_id]
    eos = getattr(generation_config, "eos_token_id", None)
    ids += list(eos) if isinstance(eos, (list, tuple)) else [eos]
    ids.append(end_of_turn_id(tokenizer))
    return list(dict.fromkeys(i for i in ids if i is not None))


def generation_config_of(model=None, model_path: str | None = None):
    """The model's generation_config (transformers' GenerationConfig), from the model or its directory, or None."""
    gc = getattr(model, "generation_config", None)
    if gc is None and model_path and os.path.exists(os.path.join(model_path, "generation_config.json")):
        from transformers import GenerationConfig

        gc = GenerationConfig.from_pretrained(model_path)
    return gc


def stop_string_end(tokenizer, ids: list[int], stop: tuple[str, ...]) -> int | None:
    """The length of the shortest prefix of `ids` whose text contains a stop string, or None (binary search: a
    prefix's text is a prefix of the whole text)."""
    contains = lambda k: any(s in tokenizer.decode(ids[:k], skip_special_tokens=False) for s in stop)  # noqa: E731
    if not stop or not ids or not contains(len(ids)):
        return None
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if contains(mid) else (mid + 1, hi)
    return lo


def finish(tokenizer, ids: list[int], stops, stop: tuple[str, ...] = (), logprobs: list[float] | None = None) -> Completion:
    """The Completion of a generated row, cut by the one rule every engine follows (module docstring)."""
    stops = set(stops)
    end = next((i + 1 for i, t in enumerate(ids) if t in stops), None)
    k = stop_string_end(tokenizer, ids[:end] if end else ids, stop)
    end = k if k is not None else end
    ids = ids[:end] if end is not None else ids
    lps = logprobs[: len(ids)] if logprobs is not None else None
    return Completion(ids, tokenizer.decode(ids, skip_special_tokens=True), len(ids), end is None, lps)


def read_stops(text: str) -> tuple[str, ...]:
    """--stop's strings: split on '||', the escapes \\n \\t \\r and \\\\ read, any other backslash kept as typed (a stop
    string such as '\\boxed' must not become a backspace and 'oxed', as Python's unicode_escape would read it)."""
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
    return tuple(re.sub(r"\\([ntr\\])", lambda m: escapes[m.group(1)], x) for x in text.split("||") if x) if text else ()
