"""onnx's own backend suites through ``pluggable.onnx.backend``, on CPU,
MY_DEVICE and (where present) GPU: the node suite (one model per operator
case) and the model suites of real exporters: ``pytorch-converted`` and
``pytorch-operator`` (models exported by PyTorch) and ``simple``. Cases known
to fail are listed with a reason in tests/data/onnx_backend_xfail.txt (node
suite) and tests/data/onnx_model_suites_xfail.txt (model suites); they run as
strict expected failures, so a case that starts passing fails here until it
leaves its list. The pass rate per suite and device is printed at the end of
the session (``-s`` shows it) and written to $ONNX_BACKEND_REPORT when set.

Measured with onnx 1.23.2 (``ONNX_BACKEND_REPORT=report.txt python3 -m pytest
-q tests/test_onnx_backend.py``, 2026-12-03): node suite 1838/1884 on CPU:0, 1837 on
MY_DEVICE:0 (one float16 attention case rounds otherwise without the fused
kernel); on both, pytorch-converted 82/82; pytorch-operator 35/35; simple 15/23
(StringNormalizer and training graphs are left)."""
import os
import unittest
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx", reason="ONNX models are read with the onnx package (the onnx extra)")
import onnx.backend.test  # noqa: E402

import pluggable as pg  # noqa: E402
from pluggable.onnx import backend as pg_backend  # noqa: E402

DATA = Path(__file__).parent / "data"
# onnx's class-name kind -> (the suite's name in the report, its xfail list)
SUITES = {"Node": ("node", DATA / "onnx_backend_xfail.txt"),
          "PyTorchConverted": ("pytorch-converted", DATA / "onnx_model_suites_xfail.txt"),
          "PyTorchOperator": ("pytorch-operator", DATA / "onnx_model_suites_xfail.txt"),
          "Simple": ("simple", DATA / "onnx_model_suites_xfail.txt")}


def _xfails(path: Path) -> dict:
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            out[name] = reason.strip() or "no reason"
    return out


XFAIL = {p: _xfails(p) for p in {f for _, f in SUITES.values()}}
DEVICES = {"cpu": "CPU:0", "my_device": "MY_DEVICE:0", "gpu": "GPU:0"}
RESULTS: dict = {}   # (suite, device tag) -> {case: passed}


def _has(kind: str) -> bool:
    return any(d.device_type == kind for d in pg.list_physical_devices())


def _wrap(fn, case: str, key: tuple):
    def run(self):
        try:
            fn(self)
        except unittest.SkipTest:
            raise
        except Exception:
            RESULTS.setdefault(key, {})[case] = False
            raise
        RESULTS.setdefault(key, {})[case] = True
    run.__name__ = fn.__name__
    return run


def _cases(tag: str, device: str) -> dict:
    bt = onnx.backend.test.BackendTest(pg_backend.for_device(device), __name__)
    bt.include(r"^test_.*_cpu$")
    bt.exclude("Real")   # the model-zoo networks: tests/test_onnx_models.py
    out = {}
    kind = DEVICES[tag].split(":")[0]
    for cname, cls in bt.test_cases.items():
        suite = cname[len("OnnxBackend"):-len("ModelTest")]
        if suite not in SUITES:
            continue
        name, xfail_file = SUITES[suite]
        xfail = XFAIL[xfail_file]
        attrs = {}
        for case in dir(cls):
            if not case.startswith("test_"):
                continue
            fn = _wrap(getattr(cls, case), case, (name, tag))
            if case in xfail or f"{case}@{tag}" in xfail:   # (NAME@TAG: that device only)
                fn = unittest.expectedFailure(fn)
            attrs[case] = fn
        new = type(f"Onnx{suite}_{tag}", (cls,), attrs)
        if not _has(kind):
            new = unittest.skip(f"no {kind} device in this process")(new)
        out[new.__name__] = new
    return out


for _tag, _dev in DEVICES.items():
    globals().update(_cases(_tag, _dev))


def teardown_module(module):
    lines = []
    for (suite, tag), res in sorted(RESULTS.items()):
        n, ok = len(res), sum(res.values())
        lines.append(f"onnx {suite} suite on {DEVICES[tag]}: {ok}/{n} passed "
                     f"({100.0 * ok / max(n, 1):.1f}%)")
    text = "\n".join(lines)
    print("\n" + text)
    dest = os.environ.get("ONNX_BACKEND_REPORT")
    if dest:
        Path(dest).write_text(text + "\n" + "\n".join(
            f"FAIL {suite} {tag} {c}" for (suite, tag), res in sorted(RESULTS.items())
            for c, good in sorted(res.items()) if not good) + "\n")
