"""A stand-in for reward._work that hangs on request: exercises MathReward's backstop deadline.

The reward pool uses `spawn`, so the function must be importable by name from a module (tests/ is on sys.path).
"""
import time

import reward

HANG = "<<hang>>"


def work(args):
    completion = args[0]
    if HANG in completion:
        time.sleep(60)  # a hang math-verify's own SIGALRM would not interrupt (e.g. a long C call)
    return reward.check(*args)


def warm(_):
    """Import math-verify (sympy) in this worker and stay busy a moment, so the next task goes to another worker."""
    import os

    from math_verify import parse

    parse("\\boxed{1/2}")
    time.sleep(0.3)
    return os.getpid()
