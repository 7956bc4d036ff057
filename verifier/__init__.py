"""The math reward's parts; reward.py, the file a reader opens, holds the grading rules, `check` and `MathReward`:

    extract.py       where the final answer is: after the thought, answer statements, box groups, hedges, prose
    equivalence.py   is an answer the gold answer: the normalisations math-verify lacks, then math-verify
    time_bound.py    a hard wall-time bound per check: SIGALRM in-process, worker processes killed one at a time
"""
