"""A stand-in for reward.check that hangs on request, out of SIGALRM's reach: exercises MathReward's kill path.

The reward workers are spawned processes, so the function must be importable by name from a module (tests/ is on
sys.path of the test process; the workers get it through the pickled reference).
"""
import signal
import time

import reward

HANG = "<<hang>>"


def work(completion, gold, mode, timeout, truncated=None):
    if HANG in completion:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        time.sleep(60)  # like a long C call that never returns to the interpreter
    return reward.check(completion, gold, mode, timeout, truncated)
