"""Fixtures shared by the test modules."""
import os

import numpy as np
import pytest

# The CUDA plugin's matrix-vector path (on by default): the tests run it
# (every GPU MatMul with at most 8 rows) unless the environment turned it off,
# and compare it with cuBLAS in a child process that sets
# PLUGGABLE_CUDA_GEMV=0. Set before any test loads a plugin.
os.environ.setdefault("PLUGGABLE_CUDA_GEMV", "1")


class SeededRng:
    """np.random.Generator with an unfixed seed that it can print."""

    def __init__(self):
        seed = np.random.SeedSequence().entropy
        self._gen = np.random.default_rng(seed)
        self.seed_text = f"seed={seed}"

    def __getattr__(self, name):
        return getattr(self._gen, name)


@pytest.fixture
def rng():
    """Fresh random inputs for every test; failures print `rng.seed_text`."""
    return SeededRng()


@pytest.fixture(scope="session")
def tf_oracle():
    """TensorFlow in a child process (see tests/tf_oracle.py); skips where
    TensorFlow is not installed."""
    from tf_oracle import TFOracle, tensorflow_available
    if not tensorflow_available():
        pytest.skip("TensorFlow is not installed: the reference for this test")
    oracle = TFOracle()
    yield oracle
    oracle.close()
