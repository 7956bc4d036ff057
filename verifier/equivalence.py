"""Equivalence: is one answer the gold answer? Both are normalised (the forms math-verify lacks: thousands
separators, decimal commas, currency and units, e-notation, percents, repeating decimals, empty sets, all reals,
inequalities as intervals, vectors, choices and words; reward.py's module docstring lists them), then compared by
math-verify with the gold wrapped in `\\boxed{}`. An exact string match and two plain integers need no math-verify.
"""
from __future__ import annotations

import logging
import re
from fractions import Fraction

# ================================================================================================
# Normalisation: one answer, written the way math-verify reads it best
# ================================================================================================
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


def inequality_interval(s: str) -> str | None:
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
    interval = inequality_interval(s)
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
# Equivalence
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


def fast_verdict(parts: list[str] | None, gold: str) -> bool | None:
    """In-process shortcut: no answer (wrong), one part that is the gold string or an integer vs an integer."""
    if not parts:
        return False
    if len(parts) == 1:
        return _fast(parts[0], gold)
    return None


def quiet_math_verify():
    """math-verify logs every answer it cannot parse: silence it (a wrong answer is a verdict, not a warning)."""
    for name in ("math_verify", "math_verify.parser", "math_verify.grader", "math_verify.utils"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
