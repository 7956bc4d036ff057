"""What the model is asked: the built-in tasks, where a run's problems come from, and how a problem becomes a prompt.

    addition.py      the built-in math task: multi-operand addition with worked steps, levels 1-5 ('builtin-math')
    piecewise.py     the built-in code task: piecewise functions of n, stdin/stdout tests in 3 levels ('builtin-code')
    split.py         train vs held-out for a generated task: a hash of the problem's text (disjoint whatever the seed)
    load.py          load_dataset: --data -> Examples (a built-in task, a file or hub dataset, code problems)
    countdown.py     Countdown ('builtin-countdown', --reward countdown): a target from 3-5 numbers with + - * /; exact
                     parser-based verifier (CountdownReward), solver and search traces
    rg.py            reasoning-gym's tasks ('rg:NAME?settings', --reward rg): seeded disjoint splits, curriculum levels,
                     an exact reward (RGReward: its answer rule, partial credit 0) and answer-anywhere accuracy
    templates.py     the prompt templates (--template): chat, plain, qwen-math, r1-zero, dapo; opens_thought
"""
