"""``swapcast serve``: run a node (single node, embedded defaults, no Redis needed)."""

from __future__ import annotations

import argparse

from swapcast.commands.common import add_engine_flags, config_from_args


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="run the media server")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (default 8080)")
    parser.add_argument("--rtmp-port", type=int, help="RTMP port for OBS/ffmpeg publishers (default 1935, 0 = any free)")
    add_engine_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvloop
    from aiohttp import web

    from swapcast.app import build_app

    config = config_from_args(args)
    uvloop.install()
    app = build_app(config)  # loads the face engine
    print(
        f"swapcast serving on http://{config.server.host}:{config.server.port}/ and "
        f"rtmp://{config.server.host}:{config.rtmp.port}/live/<stream key> (Ctrl+C stops)",
        flush=True,
    )
    # run_app turns SIGINT/SIGTERM into a graceful exit: the node's shutdown hook ends every
    # live session before the server stops
    web.run_app(app, host=config.server.host, port=config.server.port, print=None)
    return 0
