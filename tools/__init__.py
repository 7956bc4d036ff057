"""The project's offline tools, each run as `python -m tools.NAME` from the repository root:

    tiny.py     the offline tiny models and their cold-start SFT (python -m tools.tiny [--ship])
    grade.py    offline difficulty grading of math and code problems, and the papers' filters (python -m tools.grade)
"""
