"""Tools run from the repository root as `python -m tools.NAME`: checks of an installation, not part of training.

    python -m tools.check_install [--require-gpu]   what is installed, the GPUs seen, what train.py will use
    python -m tools.resolve_gpu                     the `gpu` extra resolves on Linux x86-64 (pip --dry-run, no GPU)
"""
