"""Where the C headers plugin authors compile against are."""
from __future__ import annotations

import os

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def get_include() -> str:
    """Directory of the C headers plugin authors compile against (shipped in
    the package; the source tree's ``c_api/include`` in a development
    checkout that was not built)."""
    packaged = os.path.join(_PACKAGE, "include")
    if os.path.isdir(packaged):
        return packaged
    return os.path.join(os.path.dirname(_PACKAGE), "c_api", "include")
