"""`drivetrain bench NAME [ARGS...]`: run a benchmark script of the repository's bench/ folder.

`drivetrain bench loader --workers 2` runs `bench/loader.py --workers 2`; `input-wait` runs
`bench/input_wait.py`. Any other bench/<name>.py (e.g. `build`) runs the same way.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

__all__ = ["BENCH_DIR", "add_bench_commands"]

#: bench/ of the source checkout (the package is installed editable).
BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def _run_bench(args: argparse.Namespace) -> int:
    script = BENCH_DIR / f"{args.name.replace('-', '_')}.py"
    if not script.is_file():
        available = sorted(p.stem.replace("_", "-") for p in BENCH_DIR.glob("*.py"))
        print(f"no benchmark {args.name!r} in {BENCH_DIR}; available: {available}", file=sys.stderr)
        return 2
    argv, sys.argv = sys.argv, [str(script), *args.bench_args]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        sys.argv = argv
    return 0


def add_bench_commands(groups: argparse._SubParsersAction) -> None:
    """Add the `bench` group to the `drivetrain` subparsers."""
    parser = groups.add_parser("bench", help="run a benchmark from bench/ (loader, input-wait, ...)")
    parser.add_argument("name", help="benchmark name: loader, input-wait, or any bench/<name>.py")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments for the benchmark script")
    parser.set_defaults(func=_run_bench)
