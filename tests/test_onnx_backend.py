"""onnx's own node test suite through ``pluggable.onnx.backend``, on CPU,
MY_DEVICE and (where present) GPU. Cases known to fail are listed with a
reason in tests/data/onnx_backend_xfail.txt; they run as strict expected
failures, so a case that starts passing fails here until it leaves the list.
The pass rate per device is printed at the end of the session
(``-s`` shows it) and written to $ONNX_BACKEND_REPORT when set."""
import os
import re
import unittest
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
import onnx.backend.test  # noqa: E402

import pluggable as pg  # noqa: E402
from pluggable.onnx import backend as pg_backend  # noqa: E402

XFAIL_FILE = Path(__file__).parent / "data" / "onnx_backend_xfail.txt"


def _xfails() -> dict:
    out = {}
    for line in XFAIL_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            out[name] = reason.strip() or "no reason"
    return out


XFAIL = _xfails()
DEVICES = {"cpu": "CPU:0", "my_device": "MY_DEVICE:0", "gpu": "GPU:0"}
RESULTS: dict = {}


def _has(kind: str) -> bool:
    return any(d.device_type == kind for d in pg.list_physical_devices())


def _wrap(fn, case: str, tag: str):
    def run(self):
        try:
            fn(self)
        except unittest.SkipTest:
            raise
        except Exception:
            RESULTS.setdefault(tag, {})[case] = False
            raise
        RESULTS.setdefault(tag, {})[case] = True
    run.__name__ = fn.__name__
    return run


def _cases(tag: str, device: str) -> dict:
    bt = onnx.backend.test.BackendTest(pg_backend.for_device(device), __name__)
    bt.include(r"^test_.*_cpu$")
    for kind in ("Real", "Simple", "PyTorchConverted", "PyTorchOperator"):
        bt.exclude(kind)
    out = {}
    for cname, cls in bt.test_cases.items():
        if not cname.endswith("OnnxBackendNodeModelTest"):
            continue
        attrs = {}
        for name in dir(cls):
            if not name.startswith("test_"):
                continue
            fn = _wrap(getattr(cls, name), name, tag)
            if name in XFAIL:
                fn = unittest.expectedFailure(fn)
            attrs[name] = fn
        kind = DEVICES[tag].split(":")[0]
        new = type(f"OnnxNode_{tag}", (cls,), attrs)
        if not _has(kind):
            new = unittest.skip(f"no {kind} device in this process")(new)
        out[new.__name__] = new
    return out


for _tag, _dev in DEVICES.items():
    globals().update(_cases(_tag, _dev))


def teardown_module(module):
    lines = []
    for tag, res in sorted(RESULTS.items()):
        n, ok = len(res), sum(res.values())
        lines.append(f"onnx node suite on {DEVICES[tag]}: {ok}/{n} passed "
                     f"({100.0 * ok / max(n, 1):.1f}%)")
    text = "\n".join(lines)
    print("\n" + text)
    dest = os.environ.get("ONNX_BACKEND_REPORT")
    if dest:
        Path(dest).write_text(text + "\n" + "\n".join(
            f"FAIL {tag} {c}" for tag, res in sorted(RESULTS.items())
            for c, good in sorted(res.items()) if not good) + "\n")
