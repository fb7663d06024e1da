"""The `gpe` command."""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys


def _load_target(target: str):
    path, _, name = target.rpartition(":")
    if not path or not name:
        raise SystemExit(f"gpe: expected FILE:FUNCTION, got {target!r}")
    if not os.path.exists(path):
        raise SystemExit(f"gpe: no such file: {path}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("_gpe_target", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise SystemExit(f"gpe: {path} has no function {name!r}")
        obj = getattr(obj, part)
    return obj


def _explain(args) -> int:
    from gpe.api import explain
    explain(_load_target(args.target))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpe", description="Graph program extraction for imperative TensorFlow 2.")
    commands = parser.add_subparsers(dest="command", required=True)
    explain = commands.add_parser(
        "explain", help="show where each line of a function runs and what crosses",
        description="Show, per source line of FUNCTION, whether it runs in the TF part, on "
                    "the host or on both, why, and which values cross in which direction. "
                    "Arguments are assumed to be tensors.")
    explain.add_argument("target", metavar="FILE:FUNCTION",
                         help="a Python file and a function in it (Class.method works)")
    explain.set_defaults(run=_explain)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
