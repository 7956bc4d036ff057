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
                 5. a response cut off by the length limit (the engine's Completion.truncated, passed as
                    `truncated`) has no prose answer (rule 4): an expression in its last line that equals the gold
                    ("... = 7$ and then we multiply by the") scores wrong. An answer statement, box or closed
                    `<answer>` pair written before the cut still counts (rules 1-3), and a box the cut interrupts is
                    no answer. A response that ended (EOS, end of turn, a stop string) is finished however its last
                    sentence ends ("Answer \\[ 9 \\]"). Without the flag (truncated=None: a text scored without
                    its Completion) "cut off" is read off the text: its last sentence is unfinished (it does not end
                    in . ! or ?, then only closing marks).
               Every mode reads the text without the end-of-turn and EOS strings it ends in (`<|im_end|>`, `</s>`,
               `<|eot_id|>`, ...: verifier.extract.END_MARKS, and MathReward's `end_marks`), which a model that
               spells them out in ordinary tokens leaves in the decoded text.
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
               ("1/2" for "0.5"). Use with DAPO's prompt (tasks/templates.py, --template dapo).

Thoughts (every mode): one rule. The answer is read after the thought, and a thought that never closes holds no
answer: a format error, scored `wrong_reward` like any wrong answer. A thought is opened either by the response
(`<think>` in its text: Qwen3 with thinking on, DeepSeek-R1-Zero's template) or by the prompt: DeepSeek-R1-Distill's
chat template ends the generation prompt with `<｜Assistant｜><think>\n` (Qwen3-Thinking-2507's with `<think>\n`), so
the response holds `</think>` and never `<think>`. `MathReward(thought_open=True)` (train.py and evaluate.py set it
when the prompt leaves a thought open, tasks.templates.opens_thought) reads each response as `<think>` + response, so
both cases meet the same rule: a response cut off by the length limit in mid-thought scores wrong even when it tried a
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

The parts (verifier/): extract.py finds the final answer, equivalence.py compares it with the gold, time_bound.py
holds the hard time bound (SIGALRM, the worker pool). This file holds the rules above, `check` (one completion) and
`MathReward` (a batch: the reward the trainer calls).
"""
from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass

from verifier.equivalence import fast_verdict, grade, quiet_math_verify
from verifier.extract import END_MARKS, THINK_OPEN, announces_several, extract, strip_end_marks
from verifier.time_bound import KILL_GRACE, START_TIMEOUT, Timeout, WorkerPool, alarm

MODES = ("math", "math-strict", "math-dapo")
FAST_MAX_CHARS = 20_000  # longer completions are read in a worker, under the time bound


@dataclass
class Verdict:
    correct: bool
    timed_out: bool = False
    extracted: str | None = None
    seconds: float = 0.0  # wall time of the check as the caller saw it (0 for the in-process shortcuts)


def check(completion: str, gold: str, mode: str = "math", timeout: float = 5.0,
          truncated: bool | None = None) -> Verdict:
    """Verdict for one completion, in this process. The whole check (extraction included) runs under one SIGALRM
    of `timeout` seconds when called from the main thread; elsewhere it runs unbounded. truncated: rule 5's flag."""
    t0 = time.monotonic()
    parts = None
    try:
        with alarm(timeout):
            quiet_math_verify()
            parts = extract(completion, mode, truncated)
            ok = grade(parts, gold, decimal_comma=not announces_several(completion, mode))
        return Verdict(ok, extracted=None if parts is None else ", ".join(parts), seconds=time.monotonic() - t0)
    except Timeout:
        return Verdict(False, timed_out=True, extracted=None if parts is None else ", ".join(parts),
                       seconds=time.monotonic() - t0)
    except Exception:  # an answer that breaks the parser is a wrong answer
        return Verdict(False, extracted=None if parts is None else ", ".join(parts), seconds=time.monotonic() - t0)


def warm_worker():
    """What a reward worker runs before its first job: math-verify imported and quiet, sympy's lazy imports paid."""
    quiet_math_verify()
    for pred, gold in (("x^2+2x+1", "(x+1)^2"), ("[1,2)", "x \\ge 1"), ("\\frac{\\sqrt{2}}{2}", "0.7071")):
        check(f"\\boxed{{{pred}}}", gold, "math", 0)  # warm: the first job must not pay sympy's lazy imports


class MathReward:
    """Scores completions against gold answers: (rewards, correct, metrics) for a batch.

    mode: 'math' (default, a careful grader), 'math-strict' (boxed only), 'math-dapo' (DAPO's "Answer:" line).
    workers: checking processes (0 = in the calling thread); a warm spare waits beside them to replace a killed one.
    thought_open: the prompts end inside a thought (R1-Distill's generation prompt `<think>\n`,
    tasks.templates.opens_thought): each response is read as `<think>` + response, so one without `</think>` is a
    format error (module docstring).
    check_fn: the function a worker runs per completion (module-level, for pickling); `check` unless a test swaps it.
    end_marks: end strings to drop from the end of each response besides END_MARKS (the tokenizer's eos_token).
    Called with `truncated` (the Completions' flags, one per response) it reads rule 5 off the engine; without it
    (None: a caller that has only the texts) off each text.
    """

    def __init__(self, correct_reward: float = 1.0, wrong_reward: float = 0.0, timeout: float = 5.0,
                 workers: int | None = None, mode: str = "math", check_fn=None, thought_open: bool = False,
                 end_marks: tuple[str, ...] = ()):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.correct_reward, self.wrong_reward, self.timeout, self.mode = correct_reward, wrong_reward, timeout, mode
        self.workers = min(2, os.cpu_count() or 1) if workers is None else workers
        self.check_fn = check if check_fn is None else check_fn
        self.thought_open = thought_open  # the prompt opened a thought: each response is read as <think> + response
        self.end_marks = END_MARKS + tuple(m for m in end_marks if m and m not in END_MARKS)
        self.pool = WorkerPool(self.workers, warmup=warm_worker)  # started on the first batch that needs it

    def warm(self, wait: float = START_TIMEOUT):
        """Start the workers and the spare and wait until every one has imported math-verify."""
        self.pool.warm(wait)

    def close(self):
        self.pool.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # --- scoring --------------------------------------------------------------------------------
    def verdicts(self, completions: list[str], golds: list[str], truncated: list[bool] | None = None) -> list[Verdict]:
        if len(completions) != len(golds):
            raise ValueError(f"{len(completions)} completions but {len(golds)} gold answers")
        if truncated is not None and len(truncated) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(truncated)} truncated flags")
        cut = [None] * len(completions) if truncated is None else [bool(t) for t in truncated]
        completions = [strip_end_marks(c, self.end_marks) for c in completions]
        if self.thought_open:  # the prompt's open thought, in front of each response: one rule for both (docstring)
            completions = [THINK_OPEN + c for c in completions]
        # No answer, an exact match, integers: no math-verify, no worker (the whole built-in task).
        out: list[Verdict | None] = [None] * len(completions)
        todo = collections.deque()
        for i, (c, g) in enumerate(zip(completions, golds)):
            parts = extract(c, self.mode, cut[i]) if len(c) <= FAST_MAX_CHARS else None
            fast = fast_verdict(parts, g) if len(c) <= FAST_MAX_CHARS else None
            if fast is None:
                todo.append(i)
            else:
                out[i] = Verdict(fast, extracted=None if parts is None else ", ".join(parts))
        if not todo:
            return out
        if self.workers <= 0:
            for i in todo:
                out[i] = self.check_fn(completions[i], golds[i], self.mode, self.timeout, cut[i])
            return out
        jobs = {i: (self.check_fn, (completions[i], golds[i], self.mode, self.timeout, cut[i])) for i in todo}
        for i, o in self.pool.run(jobs, limit=self.timeout + KILL_GRACE).items():  # a job past the limit: killed
            if o.timed_out or o.failed:
                out[i] = Verdict(False, timed_out=o.timed_out, seconds=o.seconds)
            else:
                out[i] = o.value
                out[i].seconds = o.seconds
        return out

    def __call__(self, completions: list[str], golds: list[str], truncated: list[bool] | None = None):
        """(rewards, correct, metrics): floats, bools and a dict with `reward/timeouts`. A timeout scores wrong.
        truncated: each response's Completion.truncated (rule 5), or None (read off the text)."""
        v = self.verdicts(completions, golds, truncated)
        rewards = [self.correct_reward if x.correct else self.wrong_reward for x in v]
        return rewards, [x.correct for x in v], {"reward/timeouts": sum(x.timed_out for x in v)}

