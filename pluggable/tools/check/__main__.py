"""``python -m pluggable.tools.check --suite-child PATH [--with OTHER.so]``:
runs the conformance suite in this process (the parent, ``run_suite``,
starts it in a fresh process and reads the protocol lines it prints)."""
from __future__ import annotations

import argparse
import sys

from .suite import child_main

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m pluggable.tools.check")
    parser.add_argument("--suite-child", metavar="PATH", required=True)
    parser.add_argument("--with", dest="with_plugins", action="append", default=[])
    args = parser.parse_args()
    sys.exit(child_main(args.suite_child, args.with_plugins))
