"""Shared fixtures for the test suite: `tiny_model_path`, a tiny Qwen2 model built once per session.

Run:  python -m pytest -q        (pytest loads this file itself)
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> str:
    """Path of a saved tiny model (character tokenizer + Qwen2), with a short 40-step cold-start SFT."""
    from tools import tiny

    cache = tmp_path_factory.mktemp("tiny-model")
    return tiny.get_tiny_model(tiny.TinyRecipe(sft_steps=40), cache_dir=str(cache), verbose=False)


@pytest.fixture(scope="session")
def trained_model_path():
    """The default tiny model (full cold-start SFT), built once and cached like `python train.py` does."""
    from tools import tiny

    return tiny.get_tiny_model(verbose=False)
