"""TensorFlow's guide code under ``import pluggable as tf``: a CI-sized run of
``tests/guide_harness.py`` over nine notebooks, on CPU and MY_DEVICE, against
real TensorFlow in a child process. The floors are the matched counts measured
when they were set; raise them when more cells match, never lower them."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import guide_harness  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="real TensorFlow is the reference and is not installed")

NOTEBOOKS = ("advanced_autodiff", "autodiff", "basics", "function", "intro_to_graphs",
             "ragged_tensor", "tensor", "tensor_slicing", "variable")
# (notebook, device) -> (cells that match TensorFlow, cells whose values agree
# with TensorFlow's whatever the text around them): the counts of 2026-12-04
# (both devices), one under them for the notebooks with timing cells or a
# random cell whose printed structure may vary (advanced_autodiff, autodiff,
# basics, function, intro_to_graphs, ragged_tensor)
_COUNTS = {"advanced_autodiff": (31, 31), "autodiff": (28, 28), "basics": (33, 33),
           "function": (49, 49), "intro_to_graphs": (24, 24), "ragged_tensor": (76, 76),
           "tensor": (49, 49), "tensor_slicing": (21, 21), "variable": (9, 9)}
FLOOR = {(nb, device): counts for nb, counts in _COUNTS.items()
         for device in ("CPU", "MY_DEVICE")}


@pytest.fixture(scope="module")
def report():
    return guide_harness.run_all(list(NOTEBOOKS), ["CPU", "MY_DEVICE"], timeout=30)


@pytest.mark.parametrize("device", ["CPU", "MY_DEVICE"])
@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_matched_cells_do_not_regress(report, notebook, device):
    result = next(r for r in report[device] if r["notebook"] == notebook)
    counts = result["counts"]
    print(f"{notebook} on {device}: {counts['matched']}/{counts['target']} cells match "
          f"TensorFlow ({counts['values_agree']} with the values agreeing)")
    assert counts["target"] > 0, "the corpus has no cell to compare"
    failing = [(c["index"], c.get("cause")) for c in result["cells"]
               if c["status"] in ("error", "mismatch")]
    matched, values = FLOOR[(notebook, device)]
    assert counts["matched"] >= matched and counts["values_agree"] >= values, (
        f"{notebook} on {device}: {counts['matched']} cells match TensorFlow "
        f"({counts['values_agree']} with the values agreeing), under the floor "
        f"{matched} ({values}); failing cells: {failing}")


def test_compare_rules():
    """The comparison itself: tolerance, NaN, repr markers, structure-only cells."""
    tf_text = "tf.Tensor([1.00001 nan], shape=(2,), dtype=float32)"
    assert guide_harness.compare(tf_text, "tf.Tensor([1.00002 nan], shape=(2,), dtype=float32)",
                                 False) is None
    assert guide_harness.compare(tf_text, "tf.Tensor([1.1 nan], shape=(2,), dtype=float32)",
                                 False) == "numbers differ"
    assert guide_harness.compare(tf_text, "[1.00001 nan]", False) == \
        "repr differs (values agree)"
    assert guide_harness.compare("<object at 0x7f00aa>", "<object at 0x5500bb>", False) is None
    assert guide_harness.compare("[0.25 0.5]", "[0.75 0.125]", True) is None
    assert guide_harness.compare("[0.25 0.5]", "[0.75]", True) == "structure differs"


def test_nondeterministic_cells_follow_names():
    cells = [{"index": 1, "code": "x = tf.random.normal([2])"},
             {"index": 2, "code": "y = x * 2"},
             {"index": 3, "code": "print(y)"},
             {"index": 4, "code": "print(tf.ones([2]))"}]
    assert guide_harness.nondeterministic_cells(cells) == {1, 2, 3}


def test_imports_are_rewritten_only():
    code = "import tensorflow as tf\nfrom tensorflow import keras\nx = 'tensorflow'"
    assert guide_harness.IMPORT.sub(r"\1\2\3pluggable", code) == \
        "import pluggable as tf\nfrom pluggable import keras\nx = 'tensorflow'"


def test_categorise_names_the_missing_api():
    err = "AttributeError: module 'pluggable.math' has no attribute 'bincount'"
    assert guide_harness.categorise(err, False) == "missing API: tf.math.bincount"
    assert guide_harness.categorise("NameError: name 'x' is not defined", True) == \
        "NameError (a name an earlier failing cell defines)"
