"""`load_model`: a model and its tokenizer from a directory or hub name, for the trainer, the engines and
`tools/grade.py`, with one clear error line for a path that is not a model (or a hub name out of reach).
"""
from __future__ import annotations

import os


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_model(path: str, dtype, flag: str = "--model", attn_implementation: str = ""):
    """(model, tokenizer) from a local directory or a hub name; pad token = EOS when the tokenizer has none;
    attn_implementation '' = transformers' choice.

    A local directory is checked before transformers sees it, so a wrong path ends in one line naming what is
    missing (`error: --model DIR: no config.json ...`) instead of a traceback from deep inside the tokenizer.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local, is_local = os.path.expanduser(path), looks_local(path)
    if is_local:
        if os.path.isfile(local):
            raise SystemExit(f"error: {flag} {path!r}: a file, not a model directory (pass the directory that holds "
                             "config.json and the tokenizer)")
        if not os.path.isdir(local):
            raise SystemExit(f"error: {flag} {path!r}: no such directory{nearby(local)}")
        names = set(os.listdir(local))
        if "config.json" not in names:
            raise SystemExit(f"error: {flag} {path!r}: not a model directory (no config.json; expected a directory "
                             "written by save_pretrained)")
        if not names & set(TOKENIZER_FILES):
            raise SystemExit(f"error: {flag} {path!r}: no tokenizer in the directory (expected one of "
                             f"{', '.join(TOKENIZER_FILES)}; save the tokenizer beside the model)")
    src = local if is_local else path
    kw = {"dtype": dtype, **({"attn_implementation": attn_implementation} if attn_implementation else {})}
    try:
        if not is_local:  # a hub name: the local cache first, the network only when it is there
            try:
                tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **kw)
                return _with_pad(model, tok)
            except OSError:
                offline_check(path, flag)
        tok = AutoTokenizer.from_pretrained(src)
        model = AutoModelForCausalLM.from_pretrained(src, **kw)
    except (OSError, ValueError) as e:
        where = "model directory" if is_local else "local directory or reachable hub model"
        raise SystemExit(f"error: {flag} {path!r}: cannot load a model from it (not a {where}): {str(e).splitlines()[0]}")
    return _with_pad(model, tok)


def looks_local(path: str) -> bool:
    """A local path, not a hub name (ORG/NAME): absolute, ./ ~ or more than one '/', existing, or under a local
    directory (runs/nope: a mistyped run, not a hub model of an organisation called runs)."""
    return (os.path.isabs(path) or path.startswith((".", "~")) or path.count("/") > 1 or
            os.path.exists(os.path.expanduser(path)) or os.path.isdir(path.split("/")[0]))


def nearby(path: str) -> str:
    """' (DIR/ holds: a, b, ...)' for a relative `path`'s nearest directory that exists: what a mistyped name meant."""
    if os.path.isabs(path):
        return ""
    parent = os.path.dirname(os.path.normpath(path))
    while parent and not os.path.isdir(parent):
        parent = os.path.dirname(parent)
    try:
        names = sorted(n for n in os.listdir(parent) if not n.startswith(".")) if parent else []
    except OSError:
        return ""
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    return f" ({parent}/ holds: {shown})" if names else ""


def _with_pad(model, tok):
    if tok.pad_token_id is None:  # Llama-3: no pad token
        tok.pad_token = tok.eos_token
    return model, tok


def offline_check(name: str, flag: str) -> None:
    """One error line when a hub name is not in the local cache and the hub cannot be reached."""
    from data import hub_reachable

    if not hub_reachable():
        raise SystemExit(f"error: {flag} {name!r}: not a local directory, not in the Hugging Face cache, and the hub "
                         "cannot be reached from this machine (no network): download it where there is network "
                         f"(hf download {name} --local-dir DIR) and pass DIR")
