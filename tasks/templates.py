"""Prompt templates (`--template`, TEMPLATES): how a problem is put to the model.

'auto' (the default) is the tokenizer's chat template when it has one, a plain completion template otherwise, both
with the instruction used by Ring-lite / Skywork-OR1 / MiMo ("Please reason step by step, and put your final answer
within \\boxed{}."); 'chat' and 'plain' force either; 'qwen-math' is Qwen2.5-Math's system prompt; 'r1-zero'
DeepSeek-R1-Zero's completion template; 'dapo' DAPO's (an "Answer:" last line, what --reward math-dapo reads; also
what 'auto' gives with that reward). A prompt is text the engines tokenize without adding special tokens: a chat
template writes its own BOS, and the plain templates start with the tokenizer's BOS when it adds one (Llama), so a
prompt never has two. A chat template's switches (Qwen3's `enable_thinking`) come from `--chat-template-kwargs`
(JSON), passed to apply_chat_template; `opens_thought` tells whether the resulting prompt leaves a thought open
(R1-Distill's `<think>\\n`), which the reward must know (reward.py, "Thoughts").
"""
from __future__ import annotations

import json

from data import DAPO_TEMPLATE

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
CODE_INSTRUCTION = "Write a complete Python 3 program (or the requested function) in one ```python code block at the end."
PLAIN_TEMPLATE = "Question: {question}\n" + INSTRUCTION + "\nAnswer: "
# Qwen2.5-Math's system prompt (its model card and evaluation code), with the question alone as the user turn: the
# template alone moves Qwen2.5-Math-1.5B on MATH-500 from 33.0 (no template) to 61.8 before any RL (the Dr. GRPO
# paper's "understand R1-Zero" study, Table 2).
QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
# DeepSeek-R1-Zero's template (DeepSeek-R1 paper, Table 1), "prompt" replaced by the question; a completion template
# (no chat turns): the answer is read inside <answer> </answer> (verifier/extract.py: final_text).
R1_ZERO_TEMPLATE = ("A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
                    "The assistant first thinks about the reasoning process in the mind and then provides the user with "
                    "the answer. The reasoning process and answer are enclosed within <think> </think> and <answer> "
                    "</answer> tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here "
                    "</answer>. User: {question}. Assistant:")
TEMPLATES = {  # --template NAME: what each builds (build_prompt)
    "auto": "the tokenizer's chat template when it has one, else 'plain' (with --reward math-dapo: 'dapo')",
    "chat": "the tokenizer's chat template: the question and the \\boxed{} instruction as the user turn (+ --system-prompt)",
    "plain": "completion text for base models: 'Question: ...' + the instruction + 'Answer: '",
    "qwen-math": "the chat template with Qwen2.5-Math's system prompt and the question alone as the user turn",
    "r1-zero": "DeepSeek-R1-Zero's completion template (<think> </think> <answer> </answer>)",
    "dapo": "DAPO's template (an 'Answer:' last line; --reward math-dapo reads it), in the chat template if there is one",
}


def build_prompt(tokenizer, question: str, kind: str = "math", template: str = "auto", system: str = "",
                 template_kwargs: dict | None = None) -> str:
    """The prompt text for `question` (TEMPLATES; the module docstring).

    kind: 'math' (the \\boxed{} instruction), 'code', 'math-dapo' (DAPO's template, the question inside it) or
    'countdown' (no instruction: the question asks for the equation in <answer> tags, as 'r1-zero' does) or 'rg'
    (reasoning-gym, tasks/rg.py: the question ends with its format's instruction).
    template 'auto' with kind 'math-dapo' is 'dapo'; a code question keeps its instruction under any template but
    'qwen-math' and 'r1-zero' (math templates: refused by check_template). template_kwargs: extra variables for the
    chat template (`--chat-template-kwargs`, e.g. Qwen3's {"enable_thinking": false}), passed to
    apply_chat_template as TRL's `chat_template_kwargs` and verl's `apply_chat_template_kwargs` are (docs/peers.md)."""
    has_chat = bool(getattr(tokenizer, "chat_template", None))
    if template == "auto":
        template = "dapo" if kind == "math-dapo" else "chat" if has_chat else "plain"
    if template in ("chat", "qwen-math") or (template == "dapo" and has_chat):
        if template == "qwen-math":
            system, content = system or QWEN_MATH_SYSTEM, question
        elif template == "dapo":
            content = DAPO_TEMPLATE.replace("{question}", question)
        else:
            content = question if kind in ("countdown", "rg") else f"{question}\n{CODE_INSTRUCTION if kind == 'code' else INSTRUCTION}"
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": content}]
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **(template_kwargs or {}))
    if template == "dapo":
        text = DAPO_TEMPLATE.replace("{question}", question) + "\n\n"
    elif template == "r1-zero":
        text = R1_ZERO_TEMPLATE.replace("{question}", question)
    else:
        text = PLAIN_TEMPLATE.replace("{question}", question)
        if kind == "code":
            text = text.replace(INSTRUCTION, CODE_INSTRUCTION)
        elif kind in ("countdown", "rg"):  # the question states its own answer format (<answer> tags; tasks/rg.py)
            text = text.replace(INSTRUCTION + "\n", "")
    return _bos(tokenizer) + (f"{system}\n\n" if system else "") + text


def opens_thought(tokenizer, kind: str = "math", template: str = "auto", system: str = "",
                  template_kwargs: dict | None = None) -> bool:
    """Does the prompt leave a thought open, so that the response starts inside it? DeepSeek-R1-Distill's chat
    template ends its generation prompt with `<think>\\n` (so does Qwen3-Thinking-2507's); Qwen3's hybrid template
    opens none (the model writes `<think>` itself) and with enable_thinking false writes a closed, empty one. Read off
    the text the template puts after a question: its last `<think>` comes after its last `</think>`. The reward reads
    such responses as `<think>` + response (reward.py, "Thoughts")."""
    marker = "\x00question\x00"
    tail = build_prompt(tokenizer, marker, kind, template, system, template_kwargs).rsplit(marker, 1)[-1]
    return tail.rfind("<think>") > tail.rfind("</think>")


def parse_template_kwargs(text: str, flag: str = "--chat-template-kwargs") -> dict:
    """`--chat-template-kwargs` as a dict: a JSON object ('' = none); anything else is one `error:` line."""
    if not text:
        return {}
    try:
        kw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SystemExit(f"error: {flag}: not JSON ({e.msg} at character {e.pos}): {text!r}") from None
    if not isinstance(kw, dict):
        raise SystemExit(f"error: {flag}: must be a JSON object such as '{{\"enable_thinking\": false}}', got {text!r}")
    return kw


def _bos(tokenizer) -> str:
    """The BOS text a plain prompt starts with: the tokenizer's, when it adds one itself (Llama), else ''. Prompts are
    tokenized with add_special_tokens=False everywhere, so this is the prompt's only BOS."""
    bos = getattr(tokenizer, "bos_token", None)
    if not bos:
        return ""
    ids = tokenizer("a")["input_ids"]
    return bos if ids and ids[0] == tokenizer.bos_token_id else ""


def check_template(tokenizer, template: str, kind: str, flag: str = "--template", template_kwargs: dict | None = None) -> None:
    """One `error:` line for a template this tokenizer or task cannot use."""
    if template_kwargs and not getattr(tokenizer, "chat_template", None):
        raise SystemExit("error: --chat-template-kwargs: the tokenizer has no chat template to pass them to")
    if template_kwargs and template in ("plain", "r1-zero"):
        raise SystemExit(f"error: --chat-template-kwargs: {flag} {template} is a completion template, not the chat template")
    if template not in TEMPLATES:
        raise SystemExit(f"error: {flag} {template!r}: not one of {', '.join(TEMPLATES)}")
    if template in ("chat", "qwen-math") and not getattr(tokenizer, "chat_template", None):
        raise SystemExit(f"error: {flag} {template}: the tokenizer has no chat template (use --template plain or auto)")
    if template == "qwen-math" and kind == "countdown":
        raise SystemExit(f"error: {flag} qwen-math: its system prompt asks for a \\boxed{{}} answer, and Countdown's is in "
                         "<answer> tags (use auto, chat, plain or r1-zero)")
    if template in ("qwen-math", "r1-zero", "dapo") and kind == "code":
        raise SystemExit(f"error: {flag} {template}: a math template, and this task is code (use auto, chat or plain)")
    if template == "dapo" and kind != "math-dapo":
        raise SystemExit(f"error: {flag} dapo: its answer is an 'Answer:' line, which only --reward math-dapo reads")
