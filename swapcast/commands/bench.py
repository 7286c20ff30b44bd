"""``swapcast bench …``: speed, quality and memory numbers, printed side by side."""

from __future__ import annotations

import argparse

from swapcast.commands.common import add_engine_flags, add_swap_flags


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("bench", help="benchmarks (engine, …)")
    benches = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    engine = benches.add_parser("engine", help="face engine: per-stage times, frames/s, batch throughput, jitter, identity")
    engine.add_argument("--frames", type=int, default=120, help="frames per resolution (default 120)")
    engine.add_argument("--report", metavar="DIR", help="write side-by-side swap pictures and report.json here")
    engine.add_argument("--json", action="store_true", help="print the report as JSON at the end")
    add_swap_flags(engine)
    add_engine_flags(engine)
    engine.set_defaults(run=_run_engine)


def _run_engine(args: argparse.Namespace) -> int:
    from swapcast.benchmarks.engine import run_engine_benchmark
    from swapcast.commands.common import config_from_args

    return run_engine_benchmark(config_from_args(args), frames=args.frames, report_dir=args.report, as_json=args.json)
