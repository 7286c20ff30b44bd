"""``swapcast serve``: run a node (single node, embedded defaults, no Redis needed)."""

from __future__ import annotations

import argparse

from swapcast.commands.common import add_engine_flags, config_from_args


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="run the media server")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (default 8080)")
    add_engine_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvloop
    from aiohttp import web

    from swapcast.app import build_app

    config = config_from_args(args)
    uvloop.install()
    print(f"swapcast serving on http://{config.server.host}:{config.server.port}/ (Ctrl+C stops)", flush=True)
    web.run_app(build_app(config), host=config.server.host, port=config.server.port, print=None)
    return 0
