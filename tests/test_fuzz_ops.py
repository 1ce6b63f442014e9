"""Fuzzing op calls at small scale: a seeded mutator (tests/fuzz_ops.py)
turns each op's example calls into a few thousand broken ones (shapes,
dtypes, index and size values, attributes, missing inputs), eagerly and
traced, on CPU and MY_DEVICE, in a child process. The child must exit
normally (no signal), within a time bound (no hang), and every failure must
be a pluggable error or a TypeError. The seed is fresh each run
(PLUGGABLE_FUZZ_SEED fixes it) and is printed with any failure."""
from __future__ import annotations

import pytest

from test_fuzz_readers import _run


@pytest.mark.parametrize("device", ["CPU:0", "MY_DEVICE:0"])
def test_fuzzed_op_calls_give_only_typed_errors(device):
    result = _run(device, 4000, timeout=240, script="fuzz_ops.py")
    # the mutator must reach both outcomes, or it tests nothing
    assert result["typed"] > 1000 and result["ok"] > 1000, result
