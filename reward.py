"""Math reward: is the model's final answer the gold answer? Graded the way a careful human grader would, with
math-verify as the equivalence checker, under a hard wall-time bound per completion.

Modes (MathReward(mode=...); `--reward` in train.py)
  math         (default) the final answer wherever a careful grader looks, in the text after the thought ("Thoughts"
               below: after the last `</think>`; nothing when a thought never closes):
                 1. the last *answer statement* wins: a `\\boxed{}` / `\\fbox{}` (also one the math closed before
                    the box did, `$\\boxed{5$`: its content up to that `$`), an "Answer: X" / "Final Answer: X"
                    line, a line "**Final Answer**" followed by the answer, "the (final) answer is X", "#### X".
                    So a box followed by "wait, that's wrong ... the answer is 9" is graded on 9, and an
                    intermediate box followed by "Final Answer: 15" on 15.
                 2. several boxes close together ("x = \\boxed{2} and y = \\boxed{3}") are one answer, compared as
                    the list "2, 3" (at most 12); a gap of more than 80 characters, or in the gap an answer phrase,
                    a conclusion ("so", "therefore") or a correction ("wait", "wrong", "should be"), separates them.
                    A remark after the box ("this answer is correct", "as shown above") is not a statement.
                 3. a hedge is wrong: two different values offered as the answer ("\\boxed{3} or \\boxed{5}",
                    "Answer: 7 (or possibly 8)") score wrong even when one of them is right, unless together they
                    are the gold answer (gold "\\pm 2", answer "\\boxed{2} or \\boxed{-2}").
                 4. no statement at all: the answer in prose, from the last sentence that holds a number or a formula
                    ("...so she has 12 apples in total."): the value after "is / are / equals / has / takes ...",
                    else the last formula's right-hand side, else the last number. A sentence whose answer is none
                    of these ("she ends up with 12 apples after giving 3 away") is missed: which of its numbers
                    answers the question needs the question, and a wider guess would reward wrong numbers.
                    An answer line written as a sentence ("Answer: the price is 7,5 €") is read the same way.
                 5. a response cut off by the length limit: the reward reads text only, so "cut off" means a text
                    whose last sentence is unfinished (it does not end in . ! or ?, then only closing marks). Such a
                    text has no prose answer (rule 4): an expression in its last line that equals the gold
                    ("... = 7$ and then we multiply by the") scores wrong. An answer statement or box written before
                    the cut still counts (rules 1-3), and a box the cut interrupts is no answer. A cut that happens
                    to fall at the end of a sentence cannot be told from a finished response.
               Rules 1-5 are this project's reading of what a grader does; math-verify's default extraction (which
               Skywork-OR1's released verifier calls) takes the box first and else the last expression, and does
               not see hedges or retractions.
  math-strict  boxed-only, the format requirement of Skywork-OR1 (its verifier's format rule, Sec. 7.1): the last box
               group after the thought ("Thoughts"); no box means wrong, and so does an answer statement after the
               last box (a retracted box is not the final answer). Multi-box answers and hedges as in `math`.
               (Skywork-OR1's released `math_verify_reward_function` is looser: it calls math-verify's default
               extraction, which falls back to the last expression when there is no box. The project follows the
               paper's boxed format, as the Skywork recipe's prompt asks for it.)
  math-dapo    DAPO's "Answer:" line, read as DAPO's code reads it (eval/math_dapo.py): only the last 300 characters,
               the last match of `(?i)Answer\\s*:\\s*([^\\n]+)`; no match means wrong. (DAPO reads the whole
               response's tail; here the tail of the text after the thought, "Thoughts": the same text for the base
               models DAPO trains, which write no thought tags.) DAPO then compares Minerva-normalised strings for
               equality; here the line is compared with the equivalence check below, which agrees with string
               equality on DAPO-Math-17k's integer answers and also accepts equal values written differently
               ("1/2" for "0.5"). Use with data.py's DAPO prompt (build_prompt(kind="math-dapo")).

Thoughts (every mode): one rule. The answer is read after the thought, and a thought that never closes holds no
answer: a format error, scored `wrong_reward` like any wrong answer. A thought is opened either by the response
(`<think>` in its text: Qwen3 with thinking on, DeepSeek-R1-Zero's template) or by the prompt: DeepSeek-R1-Distill's
chat template ends the generation prompt with `<｜Assistant｜><think>\n` (Qwen3-Thinking-2507's with `<think>\n`), so
the response holds `</think>` and never `<think>`. `MathReward(thought_open=True)` (train.py and evaluate.py set it
when the prompt leaves a thought open, data.opens_thought) reads each response as `<think>` + response, so both cases
meet the same rule: a response cut off by the length limit in mid-thought scores wrong even when it tried a
`\boxed{}` on the way; a closed thought is read after its last `</think>`; a response with no thought tag at all,
from a prompt that opened none, is read whole. Sources: rLLM / DeepScaleR's math reward (`RewardMathFn.__call__`,
rllm/rewards/math_reward.py) returns its `format_error_reward` (0) when the response has no `</think>` (the models
it trains, R1-Distill, get the `<think>` from the prompt); Skywork-OR1's copy of it (deepscaler_math/math_reward.py,
the reward its training code calls) asks for both `<think>` and `</think>` in the response. Where the project
departs: both read the text after the *first* `</think>` (`split("</think>")[1]`), the project after the last (a
model that closes twice writes its answer after the second); and Skywork-OR1's `math_verify_reward_function` grades
the whole text when there is no `</think>`, which grades a cut-off thought: the project never does.

Equivalence (every mode): both answers are normalised, then compared by math-verify with the gold answer wrapped in
`\\boxed{}` ("a crucial step", Skywork-OR1 Sec. 7.1). Normalisations math-verify lacks:
  * thousands separators written with LaTeX spacing (`1\\,234`, `1\\;234`, `1~234`, `1\\ 234`, `1 000 000`,
    `11,\\! 111,\\! 100`);
  * a comma between digits: d,ddd groups are thousands; otherwise "3,5" is the decimal 3.5 (the decimal comma of most
    of Europe) when the gold is one value and the words before the answer do not announce several ("the solutions
    are 1,5" is the list 1, 5), and the list 3, 5 against a list gold;
  * a currency sign in front (`\\$`, `\\text{\\$}`, `€`, `£`) or after ("12 €"), and a unit word after
    ("12.50 dollars");
  * e-notation: `1.5e-3` as `1.5\\times10^{-3}` (`3e` stays Euler's number times 3);
  * a percent against the bare number MATH writes as the gold of a percent question: `2.5\\%` for 2.5 (as `28\\%`
    for 28), while `0.025` stays wrong for 2.5 (the grader never sees the question);
  * repeating decimals (`0.\\overline{3}`, `0.1\\overline{6}`, `0.\\dot{3}`, `0.333\\ldots`) as fractions;
  * "28 percent" as `28\\%` (math-verify then accepts 28, 28% and 0.28 for a gold 28%);
  * a whole answer wrapped in `\\text{}` / `\\textbf{}` / `\\mathrm{}` / `\\mbox{}`, and "12 apples" as 12;
  * every empty-set symbol (`\\emptyset`, `\\varnothing`, `\\{\\}`, `\\O`) as one, and "all real numbers",
    `\\mathbb{R}`, `x \\in \\mathbb{R}` as `(-\\infty,\\infty)`;
  * an inequality in one variable as its interval (`x > 3` is `(3,\\infty)`; "x \\le 1 or x \\ge 3" a union), also
    reversed (`5 > x \\ge 1`), negated (`x \\not< 3` is `x \\ge 3`) or on `-x` (`-x < -3` is `x > 3`);
  * a column vector / `\\langle\\rangle` as a tuple; `°` as `^\\circ`;
  * multiple-choice letters and word answers ("Yes", `\\text{Evelyn}`) compared as letters / words.
  An exact string match and two plain integers need no math-verify (the built-in task's `\\boxed{18}`; ~1 ms saved
  per call at 256 responses a step). A candidate answer longer than 20 x the gold + 200 characters is wrong without
  parsing: no grader reads a 100k-character "final answer" as a short gold.

Scoring: correct -> `correct_reward`, anything else -> `wrong_reward` (+1/-1 for DAPO and Compass-Thinker, DAPO
Eq. 7; 1/0 for Ring-lite, Skywork-OR1, MiMo). A check that runs out of time scores `wrong_reward` too, and is
counted in `reward/timeouts`: a pathological answer must never beat a wrong one.

Hard time bound: every completion that needs math-verify is checked in a worker process, under a SIGALRM for the
whole check (extraction, normalisation, every parse and verify together, not per math-verify stage). A worker
that has not answered `timeout + KILL_GRACE` seconds after it got the job (a C-level loop SIGALRM cannot
interrupt) is killed, its job scored as a timeout, and a warm spare worker takes its place at once (a new spare
starts in the background). So a pathological answer costs its worker at most one timeout, and the honest answers
beside it are still scored by the other workers. With `workers=0` the check runs in the calling thread: bounded by
SIGALRM in the main thread only (not in seamless' scoring thread), and a C-level hang is not interrupted.
"""
from __future__ import annotations

import collections
import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from multiprocessing import resource_tracker

MODES = ("math", "math-strict", "math-dapo")
KILL_GRACE = 0.25  # seconds past the timeout before a silent worker is killed
FAST_MAX_CHARS = 20_000  # longer completions are read in a worker, under the time bound
START_TIMEOUT = 120.0  # seconds a fresh pool may take to import math-verify


@dataclass
class Verdict:
    correct: bool
    timed_out: bool = False
    extracted: str | None = None
    seconds: float = 0.0  # wall time of the check as the caller saw it (0 for the in-process shortcuts)


# ================================================================================================
# 1. Extraction: where the final answer is
# ================================================================================================
THINK_OPEN = "<think>"  # what MathReward(thought_open=True) puts in front of a completion (the prompt's own tag)


def after_thought(completion: str) -> str | None:
    """The text after the thought: after the last </think>; None when a thought opened (<think>) and never closed,
    the format error (module docstring, "Thoughts"); the whole text when there is no thought."""
    if "</think>" in completion:
        return completion.rsplit("</think>", 1)[1]
    return None if THINK_OPEN in completion else completion


def final_text(completion: str, mode: str = "math") -> str:
    """The part of the completion a grader reads: after the last </think>; nothing if a <think> never closes; inside
    the last <answer>...</answer> when there is one (DeepSeek-R1-Zero's format, data.py's --template r1-zero)."""
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


def extract(completion: str, mode: str = "math") -> list[str] | None:
    """The final answer as a list of parts (one part, or the parts of a multi-box / "or" answer); None: no answer."""
    if mode == "math-dapo":
        text = after_thought(completion)
        found = re.findall(r"(?i)Answer\s*:\s*([^\n]+)", text[-300:]) if text is not None else None
        return split_alternatives(found[-1]) if found else None
    text = final_text(completion, mode)
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
    if not _FINISHED.search(text.rstrip()[-40:]):  # cut off mid-sentence (the length limit): no prose answer
        return None
    prose = _prose_answer(text)
    return [prose] if prose else None


def extract_answer(completion: str, mode: str = "math") -> str | None:
    """The final answer as one string ("2, 3" for a two-box answer), or None."""
    parts = extract(completion, mode)
    return None if parts is None else ", ".join(parts)


# ================================================================================================
# 2. Normalisation: one answer, written the way math-verify reads it best
# ================================================================================================
_OR = re.compile(r"\\text\{\s*or\s*\}|\\mbox\{\s*or\s*\}|\bor\b|\\vee")
_HEDGE_WORDS = re.compile(r"(?i)\b(?:either|possibly|maybe|perhaps|probably|equivalently)\b")
_INEQ = re.compile(r"\\leqslant|\\geqslant|\\leq|\\geq|\\le\b|\\ge\b|\\lt\b|\\gt\b|≤|≥|<=|>=|<|>")
_OP = {"\\leqslant": "<=", "\\geqslant": ">=", "\\leq": "<=", "\\geq": ">=", "\\le": "<=", "\\ge": ">=",
       "\\lt": "<", "\\gt": ">", "≤": "<=", "≥": ">=", "<=": "<=", ">=": ">=", "<": "<", ">": ">"}


# A negated relation is its complement on the reals: x \\not< 3 is x >= 3 (\\nless, \\ngtr, \\nleq, \\ngeq likewise).
_NOT_INEQ = re.compile(r"\\not\s*(?:<|>|\\leq?\b|\\geq?\b|\\lt\b|\\gt\b)|\\nless\b|\\ngtr\b|\\nleq\b|\\ngeq\b")
_NOT_OP = {"<": ">=", ">": "<=", "\\le": ">", "\\leq": ">", "\\ge": "<", "\\geq": "<", "\\lt": ">=", "\\gt": "<=",
           "\\nless": ">=", "\\ngtr": "<=", "\\nleq": ">", "\\ngeq": "<"}
_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}


def _negate(a: str) -> str:
    """-a for one side of an inequality ('3' -> '-3', '-3' -> '3', 'a+b' -> '-(a+b)')."""
    a = a.strip()
    if re.fullmatch(r"-[\w.\\{}]+", a):
        return a[1:]
    return "-" + a if re.fullmatch(r"[\w.\\{}]+", a) else f"-({a})"


def _inequality_interval(s: str) -> str | None:
    """'x > 3' -> '(3,\\infty)', '-2 \\le x < 5' -> '[-2,5)'; None unless s is one such inequality in one variable.
    Also written reversed ('5 > x > 1' is (1,5)), negated ('x \\not< 3' is x >= 3) or on -x ('-x < -3' is x > 3)."""
    s = _NOT_INEQ.sub(lambda m: " " + _NOT_OP[re.sub(r"^\\not\s*", "", m.group())] + " ", s)
    pieces = _INEQ.split(s)
    ops = [_OP[o] for o in _INEQ.findall(s)]
    pieces = [p.strip().strip("$") for p in pieces]
    var = re.compile(r"^[a-zA-Z]$")
    if len(ops) == 1 and re.fullmatch(r"-\s*[a-zA-Z]", pieces[0]) and pieces[1]:  # -x op a: x (flipped op) -a
        pieces, ops = [pieces[0][-1], _negate(pieces[1])], [_FLIP[ops[0]]]
    elif len(ops) == 1 and re.fullmatch(r"-\s*[a-zA-Z]", pieces[1]) and pieces[0]:  # a op -x
        pieces, ops = [_negate(pieces[0]), pieces[1][-1]], [_FLIP[ops[0]]]
    if len(ops) == 2 and var.match(pieces[1]) and ops[0][0] == ops[1][0] == ">":  # 5 > x >= 1: 1 <= x < 5
        pieces, ops = pieces[::-1], [_FLIP[ops[1]], _FLIP[ops[0]]]
    if len(ops) == 1 and var.match(pieces[0]) and pieces[1]:  # x op a
        a, op = pieces[1], ops[0]
        return {"<": f"(-\\infty,{a})", "<=": f"(-\\infty,{a}]", ">": f"({a},\\infty)", ">=": f"[{a},\\infty)"}[op]
    if len(ops) == 1 and var.match(pieces[1]) and pieces[0]:  # a op x
        a, op = pieces[0], ops[0]
        return {">": f"(-\\infty,{a})", ">=": f"(-\\infty,{a}]", "<": f"({a},\\infty)", "<=": f"[{a},\\infty)"}[op]
    if len(ops) == 2 and var.match(pieces[1]) and ops[0][0] == ops[1][0] == "<" and pieces[0] and pieces[2]:
        return ("[" if ops[0] == "<=" else "(") + f"{pieces[0]},{pieces[2]}" + ("]" if ops[1] == "<=" else ")")
    return None


def split_alternatives(answer: str) -> list[str]:
    """One answer text -> its parts: "3 or 5" -> ["3", "5"] (a hedge, or a two-valued answer); inequalities joined
    by "or" -> one union of intervals."""
    parts = [p for p in _OR.split(answer)]
    if len(parts) == 1:
        return [answer.strip()]
    parts = [_HEDGE_WORDS.sub("", p).strip(" \t,;$()") for p in parts]
    parts = [p for p in parts if p]
    intervals = [_inequality_interval(p) for p in parts]
    if len(parts) > 1 and all(intervals):
        return ["\\cup".join(intervals)]
    return parts or [answer.strip()]


def split_alternatives_all(answers: list[str]) -> list[str]:
    return [p for a in answers for p in split_alternatives(a)]


_WRAPPER = re.compile(r"^\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{(.*)\}$", re.S)
_THOUSANDS_TEX = re.compile(r"(?<=\d)(?:\\[,;:! ]|~|\{,\}|\\thinspace\s?)(?=\d{3}(?!\d))")
_EMPTY = re.compile(r"^(?:\\emptyset|\\varnothing|\\O|\\\{\s*(?:\\[,;: ])?\s*\\\}|\{\s*\})$")
_REPEAT_BAR = re.compile(r"(?<!\d)(-?)(\d*)\.(\d*)(?:\\(?:overline|dot)\{?(\d+)\}?|\((\d+)\))")
_REPEAT_DOTS = re.compile(r"^(-?)(\d*)\.(\d+)\s*(?:\\ldots|\\dots|\\cdots|\.\.\.)$")
_VECTOR = re.compile(r"^\\begin\{([pbv]?matrix)\}(.*?)\\end\{\1\}$", re.S)
_LANGLE = re.compile(r"^\\langle(.*)\\rangle$", re.S)
_CHOICE = re.compile(r"^\(?([A-E])\)?$|^\(([A-E])\)\s")  # "B", "(B)", "(B) 12"
_NO_SOLUTION = {"no solution", "no solutions", "no real solution", "no real solutions", "no real roots", "none"}
_UNIT_WORDS = re.compile(r"^([-+]?\d[\d,]*(?:\.\d+)?)\s*(?:[a-zA-Z]{2,}\s*)+(?:\^\{?[23]\}?)?$")
_CURRENCY = re.compile(r"^(?:\\(?:text|mbox|textrm)\{\\\$\}|\\\$|€|£|\\euro\b|\\pounds\b)\s*(?=[-+]?\.?\d)")
_CURRENCY_AFTER = re.compile(r"(?<=\d)\s*(?:\\(?:text|mbox|textrm)\{(?:\\\$|€|£)\}|\\\$|€|£|\\euro\b|\\pounds\b)$")  # 12 €
_THOUSANDS_THIN = re.compile(r"(?<=\d),\\!\s*(?=\d{3}(?!\d))")
_E_NOTATION = re.compile(r"^([-+]?\d+(?:\.\d+)?)[eE]([-+]?\d+)$")  # 1.5e-3 (not 3e: Euler's number)
_DECIMAL_COMMA = re.compile(r"^[-+]?\d+,\d+$")  # one comma between digits ("3,5"): a decimal comma, or a list
_THOUSANDS = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+$")
# words before an answer that announce several values ("the solutions are 1,5"): the comma separates them
_SEVERAL = re.compile(r"(?i)\b(?:solutions|roots|values|answers|zeros|zeroes|points|pairs|numbers|integers|both)\b")
# every real number, in words or symbols: the interval (-inf, inf)
_ALL_REALS = re.compile(r"(?i)^(?:(?:the\s+set\s+of\s+)?all\s+real(?:\s+numbers|\s+values(?:\s+of\s+[a-z])?|s|\s+[a-z])?"
                        r"|(?:every|any)\s+real\s+number|(?:[a-z]\s*\\in\s*)?\\mathbb\s*\{?R\}?|\\R)$")


def _fraction_of_repeating(sign: str, whole: str, pre: str, rep: str) -> str:
    """0.1(6) -> 1/6: the exact value of a decimal whose digits `rep` repeat after `pre`."""
    value = Fraction(int(whole or "0")) + Fraction(int(pre or "0"), 10 ** len(pre)) \
        + Fraction(int(rep), (10 ** len(rep) - 1) * 10 ** len(pre))
    value = -value if sign else value
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}" if value.denominator != 1 else str(value.numerator)


def _repeating_dots(m) -> str | None:
    """0.333... / 0.1666... : the shortest period that repeats at least three times at the end of the digits."""
    sign, whole, digits = m.groups()
    for period in range(1, len(digits) // 3 + 1):
        rep = digits[-period:]
        k = len(digits) - period
        while k >= period and digits[k - period : k] == rep:
            k -= period
        if len(digits) - k >= 3 * period or (period > 1 and len(digits) - k >= 2 * period):
            return _fraction_of_repeating(sign, whole, digits[:k], rep)
    return None


def normalize(ans: str) -> str:
    """One answer part, in a form math-verify reads as the grader means it."""
    s = ans.strip()
    for _ in range(3):
        s = s.strip().rstrip(".").strip()
        if s.startswith("$") and s.endswith("$") and len(s) > 1:
            s = s.strip("$")
        for a, b in (("\\(", "\\)"), ("\\[", "\\]")):
            if s.startswith(a) and s.endswith(b):
                s = s[len(a) : -len(b)]
        m = _WRAPPER.match(s)
        if m and "}" not in m.group(1).replace("\\}", ""):
            s = m.group(1).replace("$", "")
        if s.startswith("\\left(") and s.endswith("\\right)") and "," not in s:
            s = s[6:-7]
    s = _THOUSANDS_THIN.sub(",", s)  # 11,\! 111,\! 100: LaTeX's thin space after each thousands comma
    s = s.replace("°", "^\\circ").replace("\\!", "")
    s = re.sub(r"\s*(?:\\text\{\s*(?:percent|pct)\s*\}|\bpercent\b|\bpct\b)", "\\%", s)
    s = _CURRENCY.sub("", s)
    s = _CURRENCY_AFTER.sub("", s)
    s = _THOUSANDS_TEX.sub("", s)
    if re.fullmatch(r"[-+]?\d{1,3}(?: \d{3})+(?:\.\d+)?", s):
        s = s.replace(" ", "")
    if re.fullmatch(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")
    if _EMPTY.match(s.replace(" ", "")):
        return "\\emptyset"
    s = _REPEAT_BAR.sub(lambda m: _fraction_of_repeating(*m.groups()[:3], m.group(4) or m.group(5)), s)
    m = _REPEAT_DOTS.match(s)
    if m and (f := _repeating_dots(m)):
        s = f
    m = _VECTOR.match(s)
    if m and "&" not in m.group(2):
        s = "(" + ", ".join(x.strip() for x in m.group(2).split("\\\\") if x.strip()) + ")"
    m = _LANGLE.match(s)
    if m:
        s = "(" + m.group(1).strip() + ")"
    m = _UNIT_WORDS.match(s)
    if m:
        s = m.group(1)
    m = _E_NOTATION.match(s)
    if m:
        s = f"{m.group(1)}\\times10^{{{m.group(2)}}}"
    if _ALL_REALS.match(s.strip()):
        return "(-\\infty,\\infty)"
    interval = _inequality_interval(s)
    return interval if interval else s


def _plain_words(s: str) -> str | None:
    """'\\text{Evelyn}' -> 'evelyn'; None unless the answer is words (letters and spaces, at least two letters)."""
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}", r"\1", s).strip(" .$")
    return s.lower() if re.fullmatch(r"[A-Za-z][A-Za-z ]*[A-Za-z]", s) else None


def _choice(s: str) -> str | None:
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}", r"\1", s).strip(" .$")
    m = _CHOICE.match(s)
    return (m.group(1) or m.group(2)) if m else None


# ================================================================================================
# 3. Equivalence
# ================================================================================================
_INT = re.compile(r"[+-]?\d+")
_NUM = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")


def _fast(pred: str, gold: str) -> bool | None:
    """The verdicts that need no math-verify: the same string, two plain integers; else None."""
    p, g = pred.strip().replace(" ", "").rstrip("."), gold.strip().replace(" ", "").rstrip(".")
    if p == g:
        return True
    if _INT.fullmatch(p) and _INT.fullmatch(g):
        return int(p) == int(g)
    return None


def _parse(s: str):
    from math_verify import parse

    return parse("\\boxed{" + s + "}", parsing_timeout=None)


def equivalent(pred: str, gold: str, decimal_comma: bool = True) -> bool:
    """Is the answer `pred` the gold answer? (one answer each; both normalised here)."""
    if not pred.strip():
        return False
    fast = _fast(pred, gold)
    if fast is not None:
        return fast
    if len(pred) > 20 * len(gold) + 200:
        return False
    p, g = normalize(pred), normalize(gold)
    if decimal_comma and _DECIMAL_COMMA.match(p) and not _THOUSANDS.match(p) and "," not in g:  # "3,5" for 3.5
        # (a list answer has a list gold; an answer announced as several values is a list: check's decimal_comma)
        p = p.replace(",", ".")
    fast = _fast(p, g)
    if fast is not None:
        return fast
    if p.endswith("\\%") and _NUM.fullmatch(g) and _NUM.fullmatch(p[:-2].strip()):  # 2.5\\% for the percent 2.5
        if float(p[:-2]) == float(g):
            return True
    if "\\emptyset" in (p, g):
        return p == g or (_plain_words(p if g == "\\emptyset" else g) or "") in _NO_SOLUTION
    if (cg := _choice(gold)) is not None:
        return _choice(pred) == cg
    if (wg := _plain_words(gold)) is not None and not re.search(r"\d", pred):
        return _plain_words(pred) == wg
    from math_verify import verify

    gp, pp = _parse(g), _parse(p)
    return bool(gp) and bool(pp) and bool(verify(gp, pp, timeout_seconds=None))


def grade(parts: list[str] | None, gold: str, decimal_comma: bool = True) -> bool:
    """A final answer (its parts) against the gold: one value; or several that are together the gold answer
    (a multi-box answer); several different values that are not the gold together are a hedge: wrong."""
    if not parts:
        return False
    if len(parts) == 1:
        return equivalent(parts[0], gold, decimal_comma)
    if all(equivalent(p, parts[0]) for p in parts[1:]):  # the same value repeated
        return equivalent(parts[0], gold)
    return equivalent(", ".join(normalize(p) for p in parts), gold)


def _announces_several(completion: str, mode: str) -> bool:
    """Do the words just before the final answer announce several values ("The solutions are x = \\boxed{1,5}")? Then
    "1,5" is the list 1, 5, not a decimal comma. Read in the 100 characters before the last box (or the end)."""
    text = final_text(completion, mode) if mode != "math-dapo" else (after_thought(completion) or "")
    boxes = find_boxes(text[-20_000:])
    end = boxes[-1][0] if boxes else len(text[-20_000:])
    return bool(_SEVERAL.search(text[-20_000:][max(0, end - 100) : end]))


def _fast_verdict(parts: list[str] | None, gold: str) -> bool | None:
    """In-process shortcut: no answer (wrong), one part that is the gold string or an integer vs an integer."""
    if not parts:
        return False
    if len(parts) == 1:
        return _fast(parts[0], gold)
    return None


# ================================================================================================
# 4. One check under a whole-call time bound
# ================================================================================================
class _Timeout(BaseException):
    """Raised by SIGALRM; a BaseException so that no `except Exception` on the way (sympy, math-verify) eats it."""


def _on_alarm(signum, frame):
    raise _Timeout()


def _quiet_math_verify():
    for name in ("math_verify", "math_verify.parser", "math_verify.grader", "math_verify.utils"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def check(completion: str, gold: str, mode: str = "math", timeout: float = 5.0) -> Verdict:
    """Verdict for one completion, in this process. The whole check (extraction included) runs under one SIGALRM
    of `timeout` seconds when called from the main thread; elsewhere it runs unbounded."""
    t0 = time.monotonic()
    armed = timeout > 0 and threading.current_thread() is threading.main_thread()
    if armed:
        old = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    parts = None
    try:
        _quiet_math_verify()
        parts = extract(completion, mode)
        ok = grade(parts, gold, decimal_comma=not _announces_several(completion, mode))
        return Verdict(ok, extracted=None if parts is None else ", ".join(parts), seconds=time.monotonic() - t0)
    except _Timeout:
        return Verdict(False, timed_out=True, extracted=None if parts is None else ", ".join(parts),
                       seconds=time.monotonic() - t0)
    except Exception:  # an answer that breaks the parser is a wrong answer
        return Verdict(False, extracted=None if parts is None else ", ".join(parts), seconds=time.monotonic() - t0)
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


# ================================================================================================
# 5. Worker processes that can be killed one at a time
# ================================================================================================
def _worker_main(conn):
    """Worker loop: import math-verify, say 'ready', then check jobs (job id, function, args) until None."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle
    _quiet_math_verify()
    for pred, gold in (("x^2+2x+1", "(x+1)^2"), ("[1,2)", "x \\ge 1"), ("\\frac{\\sqrt{2}}{2}", "0.7071")):
        check(f"\\boxed{{{pred}}}", gold, "math", 0)  # warm: the first job must not pay sympy's lazy imports
    try:
        conn.send("ready")
    except (BrokenPipeError, OSError):  # the trainer ended while this worker started (Ctrl-C)
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        jid, fn, args = msg
        try:
            v = fn(*args)
        except BaseException:
            v = Verdict(False)
        conn.send((jid, v))


class _Worker:
    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        # spawn, not fork: the trainer has torch threads (and maybe CUDA) that must not be forked
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        # Started with SIGINT blocked in the calling thread: the mask is inherited through spawn's fork and exec, so
        # the new interpreter never sees a Ctrl-C sent to the process group (a terminal sends it to every process in
        # it), not even while it starts up (~1 s of imports), where it would end in a KeyboardInterrupt traceback, or
        # in an EOFError one when the trainer stops half-way through handing it its start-up data. Ctrl-C is the
        # trainer's to handle: a signal that arrives during start() is delivered to it right after. Any thread may
        # start a worker (the --rollout-lag producer replaces a timed-out one); _worker_main also ignores SIGINT.
        resource_tracker.ensure_running()  # first: starting it unblocks SIGINT and SIGTERM in this thread afterwards
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self.proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        child.close()
        self.ready, self.job, self.t0 = False, None, 0.0

    def kill(self):
        self.proc.kill()
        self.proc.join()
        self.conn.close()


class MathReward:
    """Scores completions against gold answers: (rewards, correct, metrics) for a batch.

    mode: 'math' (default, a careful grader), 'math-strict' (boxed only), 'math-dapo' (DAPO's "Answer:" line).
    workers: checking processes (0 = in the calling thread); a warm spare waits beside them to replace a killed one.
    thought_open: the prompts end inside a thought (R1-Distill's generation prompt `<think>\n`, data.opens_thought):
    each response is read as `<think>` + response, so one without `</think>` is a format error (module docstring).
    check_fn: the function a worker runs per completion (module-level, for pickling); `check` unless a test swaps it.
    """

    def __init__(self, correct_reward: float = 1.0, wrong_reward: float = 0.0, timeout: float = 5.0,
                 workers: int | None = None, mode: str = "math", check_fn=None, thought_open: bool = False):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.correct_reward, self.wrong_reward, self.timeout, self.mode = correct_reward, wrong_reward, timeout, mode
        self.workers = min(2, os.cpu_count() or 1) if workers is None else workers
        self.check_fn = check if check_fn is None else check_fn
        self.thought_open = thought_open  # the prompt opened a thought: each response is read as <think> + response
        self._pool: list[_Worker] = []
        self._spare: _Worker | None = None
        self._ctx = mp.get_context("spawn")

    # --- pool -----------------------------------------------------------------------------------
    def _start(self):
        while len(self._pool) < self.workers:
            self._pool.append(_Worker(self._ctx))
        if self._spare is None:
            self._spare = _Worker(self._ctx)

    def _replace(self, w: _Worker):
        """Kill a worker; the spare takes its place and a new spare starts (in the background)."""
        w.kill()
        self._pool[self._pool.index(w)] = self._spare
        self._spare = _Worker(self._ctx)

    def warm(self, wait: float = START_TIMEOUT):
        """Start the workers and the spare and wait until every one has imported math-verify."""
        self._start()
        deadline = time.monotonic() + wait
        for w in self._pool + [self._spare]:
            while not w.ready:
                if not w.conn.poll(max(0.0, deadline - time.monotonic())):
                    raise RuntimeError(f"a reward worker did not start within {wait:.0f} s")
                w.ready = w.conn.recv() == "ready"

    def close(self):
        for w in self._pool + ([self._spare] if self._spare else []):
            w.kill()
        self._pool, self._spare = [], None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # --- scoring --------------------------------------------------------------------------------
    def verdicts(self, completions: list[str], golds: list[str]) -> list[Verdict]:
        if len(completions) != len(golds):
            raise ValueError(f"{len(completions)} completions but {len(golds)} gold answers")
        if self.thought_open:  # the prompt's open thought, in front of each response: one rule for both (docstring)
            completions = [THINK_OPEN + c for c in completions]
        # No answer, an exact match, integers: no math-verify, no worker (the whole built-in task).
        out: list[Verdict | None] = [None] * len(completions)
        todo = collections.deque()
        for i, (c, g) in enumerate(zip(completions, golds)):
            parts = extract(c, self.mode) if len(c) <= FAST_MAX_CHARS else None
            fast = _fast_verdict(parts, g) if len(c) <= FAST_MAX_CHARS else None
            if fast is None:
                todo.append(i)
            else:
                out[i] = Verdict(fast, extracted=None if parts is None else ", ".join(parts))
        if not todo:
            return out
        if self.workers <= 0:
            for i in todo:
                out[i] = self.check_fn(completions[i], golds[i], self.mode, self.timeout)
            return out
        self._run(todo, completions, golds, out)
        return out

    def _run(self, todo, completions, golds, out):
        """Deal the jobs to idle workers; kill and replace a worker whose job overruns timeout + KILL_GRACE."""
        self._start()
        limit = self.timeout + KILL_GRACE
        started = time.monotonic()
        while todo or any(w.job is not None for w in self._pool):
            now = time.monotonic()
            for w in self._pool:
                if w.ready and w.job is None and todo:
                    i = todo.popleft()
                    w.conn.send((i, self.check_fn, (completions[i], golds[i], self.mode, self.timeout)))
                    w.job, w.t0 = i, now
            for w in list(self._pool):
                if w.job is not None and now - w.t0 > limit:
                    out[w.job] = Verdict(False, timed_out=True, seconds=now - w.t0)
                    self._replace(w)
            busy = [w.t0 + limit for w in self._pool if w.job is not None]
            if not busy and not any(w.ready for w in self._pool) and now - started > START_TIMEOUT:
                raise RuntimeError(f"no reward worker started within {START_TIMEOUT:.0f} s")
            wait = max(0.0, min(busy) - now) if busy else 0.5
            conns = [w.conn for w in self._pool] + ([self._spare.conn] if self._spare and not self._spare.ready else [])
            for conn in mp.connection.wait(conns, timeout=wait):
                w = next((x for x in self._pool + [self._spare] if x is not None and x.conn is conn), None)
                if w is None:
                    continue
                try:
                    msg = conn.recv()
                except (EOFError, OSError):  # the worker died (out of memory, killed from outside)
                    if w.job is not None:
                        out[w.job] = Verdict(False, timed_out=True, seconds=time.monotonic() - w.t0)
                    if w is self._spare:
                        w.kill()
                        self._spare = _Worker(self._ctx)
                    else:
                        self._replace(w)
                    continue
                if msg == "ready":
                    w.ready = True
                elif w.job is not None and msg[0] == w.job:
                    v = msg[1]
                    v.seconds = time.monotonic() - w.t0
                    out[w.job], w.job = v, None

    def __call__(self, completions: list[str], golds: list[str]):
        """(rewards, correct, metrics): floats, bools and a dict with `reward/timeouts`. A timeout scores wrong."""
        v = self.verdicts(completions, golds)
        rewards = [self.correct_reward if x.correct else self.wrong_reward for x in v]
        return rewards, [x.correct for x in v], {"reward/timeouts": sum(x.timed_out for x in v)}
