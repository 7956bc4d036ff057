"""The code task's machinery, apart from the math path a first reader follows:

    problems.py          the code problems' schema (ours or TACO/APPS), read with one error line per bad row
    code_reward.py       code reward: all-or-nothing, MiMo strict / soft test-difficulty scores
    sandbox.py           runs model-written programs: fresh root, namespaces, seccomp, rlimits, cgroups
    code_difficulty.py   test difficulty levels from solution pass rates (python -m coding.code_difficulty)
"""
