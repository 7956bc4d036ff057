"""Extraction: where the final answer is in a completion, read as a careful grader reads it (reward.py's module
docstring gives the rules: answer statements, box groups, hedges, prose answers, cut-off responses, thoughts).

extract(completion, mode, truncated) -> the final answer's parts, or None (no answer); extract_answer joins them. The
reading is linear in the text's length: a pathological completion costs one pass (find_boxes), never a quadratic search.
"""
from __future__ import annotations

import collections
import re

from verifier.equivalence import inequality_interval

THINK_OPEN = "<think>"  # what MathReward(thought_open=True) puts in front of a completion (the prompt's own tag)
# The end-of-turn and end-of-sequence strings of the chat formats tasks/templates.py writes prompts in (ChatML / Qwen,
# Llama 3, Llama 2 and Mistral, DeepSeek-R1-Distill, Gemma, Phi-3). The engines decode without special tokens, but a
# model that spells one out in ordinary tokens, or a text saved elsewhere, ends in it: not part of the answer.
END_MARKS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<｜end▁of▁sentence｜>",
             "<end_of_turn>", "<eos>", "<|end|>")


def strip_end_marks(text: str, marks=END_MARKS) -> str:
    """`text` without the end marks it ends in and the whitespace around them ("... $24$.<|im_end|>\\n" -> "...
    $24$."); unchanged when it ends in none. Linear: the end moves left, and the text is copied once."""
    end, cut = len(text), False
    while True:
        while end and text[end - 1].isspace():
            end -= 1
        mark = next((m for m in marks if m and text.endswith(m, 0, end)), None)
        if mark is None:
            return text[:end] if cut else text
        end, cut = end - len(mark), True


def after_thought(completion: str) -> str | None:
    """The text after the thought: after the last </think>; None when a thought opened (<think>) and never closed,
    the format error (module docstring, "Thoughts"); the whole text when there is no thought."""
    if "</think>" in completion:
        return completion.rsplit("</think>", 1)[1]
    return None if THINK_OPEN in completion else completion


def final_text(completion: str, mode: str = "math") -> str:
    """The part of the completion a grader reads: after the last </think>; nothing if a <think> never closes; inside
    the last <answer>...</answer> when there is one (DeepSeek-R1-Zero's format, --template r1-zero)."""
    completion = after_thought(completion)
    if completion is None:
        return ""
    tagged = re.findall(r"<answer>(.*?)</answer>", completion, re.S)
    return tagged[-1] if tagged else completion


_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOX_BARE = re.compile(r"\\boxed[ \t]+([^\s${}]+)")  # LaTeX's brace-less argument: \boxed 5
_BRACE = re.compile(r"(?<!\\)[{}]")  # \{ \} are literal braces (set notation), not groups


def _split_box_end(text: str, j: int) -> int | None:
    """A box whose `{` (at j) never closes but whose math does: the `$` that ends it on the same line, with every
    brace between matched (`$\\boxed{\\frac{1}{2}$`); None otherwise (a box cut off mid-answer stays unfinished)."""
    k = text.find("$", j, j + MAX_LINE)
    if k < 0 or "\n" in text[j:k]:
        return None
    depth = 0
    for m in _BRACE.finditer(text, j + 1, k):
        depth += 1 if m.group() == "{" else -1
        if depth < 0:
            return None
    return k if depth == 0 and text[j + 1 : k].strip() else None


def find_boxes(text: str) -> list[tuple[int, int, str]]:
    """Every outermost \\boxed{...} / \\fbox{...} as (start, end, content), in order. Linear time: braces are matched
    once with a stack, so 10k nested braces or 100k unclosed boxes cost one pass."""
    if "\\boxed" not in text and "\\fbox" not in text:
        return []
    close_of, stack = {}, []
    for m in _BRACE.finditer(text):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            close_of[stack.pop()] = m.start()
    found = []
    for m in _BOX_OPEN.finditer(text):
        j = m.end() - 1
        if j in close_of:
            found.append((m.start(), close_of[j] + 1, text[j + 1 : close_of[j]]))
        elif (k := _split_box_end(text, j)) is not None:  # "$\\boxed{5$.": the math closed before the box did
            found.append((m.start(), k, text[j + 1 : k]))
    found += [(m.start(), m.end(), m.group(1)) for m in _BOX_BARE.finditer(text)]
    found.sort()
    out, end = [], -1
    for b in found:  # drop boxes nested in a box already taken
        if b[0] >= end:
            out.append(b)
            end = b[1]
    return out


# Answer statements. Each pattern matches the lead only; the answer is read from at most MAX_LINE characters after
# it (to the end of the line, for a phrase to the end of the sentence), so that no input makes extraction quadratic.
MAX_LINE = 400
MAX_GROUP = 12  # boxes read as one answer at most
_ANSWER_LINE = re.compile(r"(?i)\b(?:final\s+answer|answer)[ \t*_]{0,8}[:：][ \t*_]{0,8}")  # "Answer: X", "**Final Answer:** X"
_ANSWER_HEAD = re.compile(r"(?im)^[ \t#*_>]{0,8}(?:final\s+answer|answer)[ \t*_:：]{0,8}\n[ \t\n]{0,8}")  # "**Final Answer**\nX"
_ANSWER_IS = re.compile(r"(?i)\banswer\s+(?:is|would\s+be|should\s+be|=)\s{0,8}:?\s{0,8}")  # "the (final) answer is X"
_HASHES = re.compile(r"(?m)^[ \t]{0,8}####[ \t]{0,8}")  # GSM8K's "#### X"
# A correction after the last box: "..., it should be 16", "the correct total is 18" (a value only: "x should be an
# integer" is no answer).
_CORRECTION = re.compile(r"(?i)\b(?:should\s+be|correct\s+\w+\s+is|correct\s+\w+\s+should\s+be)\s{0,8}:?\s{0,8}"
                         r"(?=\$|[-+]?\d)")
_NOT_AN_ANSWER = re.compile(r"(?i)(?:as\s+)?(?:correct|right|wrong|incorrect|consistent|reasonable|valid|verified|"
                            r"confirmed|indeed|clearly|follows|below|above|shown|computed|found|given|not|likely|"
                            r"unchanged|the same|this|that)\b")
_VALUE = re.compile(r"\$[^$\n]{1,300}\$|[-+]?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_SENTENCE_END = re.compile(r"\.(?:\s|$)|\bI hope\b")
_WORD = re.compile(r"[a-zA-Z]{3,}\b")  # a word of a sentence (3+ letters: not x, pi, ln)
_ANSWER_WORDS = re.compile(r"(?i)answer\s*(?:is|:|：)|final\s+answer|\bwait\b|\bactually\b|\bhowever\b|\binstead\b"
                           r"|\bso\b|\btherefore\b|\bthus\b|\bhence\b"
                           r"|\bcorrect\b|\bcorrect(?:ing|ion)\b|\bwrong\b|\bmistake\b|\berror\b|\bshould\s+be\b")


def _last_statement(text: str) -> tuple[int, str] | None:
    """(position, answer text) of the last answer line / phrase whose answer holds no box (that one is the box's)."""
    leads = sorted(((m.end(), rx) for rx in (_ANSWER_LINE, _ANSWER_HEAD, _ANSWER_IS, _HASHES, _CORRECTION)
                    for m in rx.finditer(text)), key=lambda t: t[0], reverse=True)
    for pos, rx in leads:
        a = text[pos : pos + MAX_LINE].split("\n", 1)[0]
        if rx in (_ANSWER_LINE, _ANSWER_IS):
            end = _SENTENCE_END.search(a)
            a = a[: end.start()] if end else a
        elif rx is _CORRECTION:
            m = _VALUE.match(a)
            if m is None:
                continue
            a = m.group()
        if not a.strip() or _NOT_AN_ANSWER.match(a.strip()):  # "... this answer is correct."
            continue
        if "\\boxed" not in a and "\\fbox" not in a:
            words = re.sub(r"\\[a-zA-Z]+|\$[^$]*\$", "", a)
            if "$" in a and re.search(r"[a-zA-Z]{3,}", words):  # a sentence on the answer line: read it as prose
                a = _prose_answer(a) or a
            elif len(_WORD.findall(words)) >= 2 and _WORD.match(words.lstrip()) and len(split_alternatives(a)) == 1:
                a = _prose_answer(a) or a  # "Answer: the price is 7,5 €": a sentence (not "5 and 7", not a hedge)
            return pos, a.strip()
    return None


_MATH_SEG = re.compile(r"\$\$?([^$]{1,300})\$\$?|\\\((.{1,300}?)\\\)|\\\[(.{1,300}?)\\\]", re.S)
_AFTER_VERB = re.compile(r"\b(?:is|are|equals|was|be|has|have|had|gets|makes|costs|takes|needs)\s{1,8}(\$[^$]{1,300}\$|[-+]?\d[\d,]*(?:\.\d+)?(?:/\d+)?)")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
# a finished text ends its last sentence: . ! ? then only closing marks (math, bold, quotes, brackets)
_FINISHED = re.compile(r"[.!?](?:\s|\$|\\[)\]]|[*_)\]}\"'])*$")


def _prose_answer(text: str) -> str | None:
    """No answer statement: the last sentence holding a number or formula, read as a grader reads prose."""
    sentences = [s for s in re.split(r"(?<=[.!?])\s+|\n+", text.strip()) if re.search(r"\d|\$|\\\(", s)]
    if not sentences:
        return None
    s = sentences[-1][-2000:]
    verb = list(_AFTER_VERB.finditer(s))
    if verb:
        a = verb[-1].group(1)
        return a.strip("$").split("=")[-1].strip() if a.startswith("$") else a.rstrip(",")
    segs = [next(g for g in m.groups() if g is not None) for m in _MATH_SEG.finditer(s)]
    if segs:
        return segs[-1].split("=")[-1].strip()
    nums = _NUMBER.findall(s)
    return nums[-1].rstrip(",") if nums else None


def _box_group(text: str, boxes) -> list[str]:
    """The last box and the boxes just before it that belong to the same answer statement."""
    group = collections.deque([boxes[-1]])
    for b in reversed(boxes[:-1]):
        gap = text[b[1] : group[0][0]]
        if len(gap) > 80 or _ANSWER_WORDS.search(gap) or len(group) == MAX_GROUP:
            break
        group.appendleft(b)
    return [b[2] for b in group if b[2].strip()] or [group[-1][2]]


def extract(completion: str, mode: str = "math", truncated: bool | None = None) -> list[str] | None:
    """The final answer as a list of parts (one part, or the parts of a multi-box / "or" answer); None: no answer.
    truncated: the engine's flag (the response hit the length limit: no prose answer, rule 5, but a closed <answer>
    pair was written before the cut); None (not known, a text without its Completion): read off the text, cut off
    when its last sentence is unfinished. The end marks the completion ends in are not read (strip_end_marks)."""
    completion = strip_end_marks(completion)
    if mode == "math-dapo":
        text = after_thought(completion)
        found = re.findall(r"(?i)Answer\s*:\s*([^\n]+)", text[-300:]) if text is not None else None
        return split_alternatives(found[-1]) if found else None
    text, after = final_text(completion, mode), after_thought(completion)
    tagged = after is not None and text != after  # the content of a closed <answer> pair: written before any cut
    boxes = find_boxes(text)
    opened = [m.start() for m in _BOX_OPEN.finditer(text[boxes[-1][1]:] if boxes else text)]
    if opened:  # cut off while writing the box: an unfinished answer
        return None
    last_stmt = _last_statement(text)
    if mode == "math-strict":  # the final answer must be boxed: a later unboxed correction voids the box
        if not boxes or (last_stmt is not None and last_stmt[0] > boxes[-1][0]):
            return None
        return split_alternatives_all(_box_group(text, boxes))
    if boxes and (last_stmt is None or boxes[-1][0] > last_stmt[0]):
        return split_alternatives_all(_box_group(text, boxes))
    if last_stmt is not None:
        return split_alternatives(last_stmt[1]) if last_stmt[1] else None
    cut = truncated if truncated is not None else not _FINISHED.search(text.rstrip()[-40:])  # unknown: a full stop?
    if cut and not tagged:  # cut off by the length limit: no prose answer
        return None
    prose = _prose_answer(text)
    return [prose] if prose else None


def extract_answer(completion: str, mode: str = "math") -> str | None:
    """The final answer as one string ("2, 3" for a two-box answer), or None."""
    parts = extract(completion, mode)
    return None if parts is None else ", ".join(parts)


_OR = re.compile(r"\\text\{\s*or\s*\}|\\mbox\{\s*or\s*\}|\bor\b|\\vee")
_HEDGE_WORDS = re.compile(r"(?i)\b(?:either|possibly|maybe|perhaps|probably|equivalently)\b")


def split_alternatives(answer: str) -> list[str]:
    """One answer text -> its parts: "3 or 5" -> ["3", "5"] (a hedge, or a two-valued answer); inequalities joined
    by "or" -> one union of intervals."""
    parts = [p for p in _OR.split(answer)]
    if len(parts) == 1:
        return [answer.strip()]
    parts = [_HEDGE_WORDS.sub("", p).strip(" \t,;$()") for p in parts]
    parts = [p for p in parts if p]
    intervals = [inequality_interval(p) for p in parts]
    if len(parts) > 1 and all(intervals):
        return ["\\cup".join(intervals)]
    return parts or [answer.strip()]


def split_alternatives_all(answers: list[str]) -> list[str]:
    return [p for a in answers for p in split_alternatives(a)]


# words before an answer that announce several values ("the solutions are 1,5"): the comma separates them
_SEVERAL = re.compile(r"(?i)\b(?:solutions|roots|values|answers|zeros|zeroes|points|pairs|numbers|integers|both)\b")


def announces_several(completion: str, mode: str) -> bool:
    """Do the words just before the final answer announce several values ("The solutions are x = \\boxed{1,5}")? Then
    "1,5" is the list 1, 5, not a decimal comma. Read in the 100 characters before the last box (or the end)."""
    completion = strip_end_marks(completion)
    text = final_text(completion, mode) if mode != "math-dapo" else (after_thought(completion) or "")
    boxes = find_boxes(text[-20_000:])
    end = boxes[-1][0] if boxes else len(text[-20_000:])
    return bool(_SEVERAL.search(text[-20_000:][max(0, end - 100) : end]))
