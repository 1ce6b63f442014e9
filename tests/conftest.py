"""Fixtures shared by the test modules."""
import contextlib
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


@pytest.fixture
def hook_sees():
    """``with hook_sees() as seen:`` installs a hook without an observer (as
    the profiler's is) for the block; `seen` gets the name of every op call
    it sees."""
    from pluggable.runtime import hooks

    @contextlib.contextmanager
    def watching():
        seen = []

        def wrapper(op, inputs, attrs, run):
            seen.append(op.name)
            return run(op, inputs, attrs)
        hooks.install(wrapper)
        try:
            yield seen
        finally:
            hooks.uninstall(wrapper)
    return watching
