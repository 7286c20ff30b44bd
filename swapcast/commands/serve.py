"""``swapcast serve``: run a node: the embedded single node by default (no Redis needed), or
a cluster node behind ``swapcast gateway`` with ``--redis URL --advertise HOST:PORT``."""

from __future__ import annotations

import argparse

from swapcast.commands.common import add_engine_flags, add_tls_flags, config_from_args
from swapcast.config import ConfigError


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("serve", help="run the media server")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (default 8080)")
    parser.add_argument("--rtmp-port", type=int, help="RTMP port for OBS/ffmpeg publishers (default 1935, 0 = any free)")
    parser.add_argument("--redis", metavar="URL", help="join a cluster: the registry's Redis (redis://host:6379/0, or redis+cluster://host:port[,host:port...])")
    parser.add_argument("--advertise", metavar="HOST:PORT",
                        help="the address the gateway reaches this node at (default: --host:--port)")
    parser.add_argument("--node-id", help="this node's id in the cluster (default: hostname + random suffix)")
    add_engine_flags(parser)
    add_tls_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import uvloop
    from aiohttp import web

    from gpu import threads
    from signaling.connection_limits import guard_app, run_guarded
    from swapcast.app import AUTH_KEY, NODE_KEY, build_app, connection_limits
    from swapcast.logs import RedactingAccessLogger

    config = config_from_args(args)
    if config.cluster.redis_url and not config.cluster.advertise and config.server.host in ("0.0.0.0", "::"):
        raise ConfigError("--advertise HOST:PORT is needed when listening on all interfaces in a cluster: "
                         "the gateway must know which address reaches this node")
    if config.cluster.redis_url and config.tls.enabled:
        raise ConfigError("tls on a cluster node: the gateway reaches its nodes over plain HTTP on the private network; "
                          "give the certificate to `swapcast gateway` (the same --tls-cert/--tls-key flags) instead")
    budget = config.threads.budget(config.engine.runner_threads)
    threads.apply(budget)  # before the engine loads: its runners and every codec size their pools by it
    uvloop.install()
    app = build_app(config)  # loads the face engine; refuses a live.video_encoder/decoder it cannot meet
    node = app[NODE_KEY]
    base = f"{'https' if node.tls else 'http'}://{config.server.host}:{config.server.port}"
    rtmps = f"and rtmps://{config.server.host}:{config.rtmp.tls_port}/live/<stream key> " if node.rtmp_server.tls else ""
    print(f"swapcast serving on {base}/ and rtmp://{config.server.host}:{config.rtmp.port}/live/<stream key> "
          f"{rtmps}(Ctrl+C stops)", flush=True)
    print(f"live H.264: encode {node.video_encoder.describe()}; decode {node.video_decoder.describe()}", flush=True)
    print(f"threads: {budget.describe()}", flush=True)
    print(config.provenance.settings().describe(), flush=True)
    dev_token = app[AUTH_KEY].dev_token
    if dev_token:  # development mode: loopback, no auth configured
        print(f"development mode (loopback, no auth configured): open {base}/#token={dev_token}\n"
              f"  admin dashboard: {base}/admin/#token={dev_token}\n"
              f"  API: Authorization: Bearer {dev_token}", flush=True)
    threads.set_os_thread_name("event-loop")  # native threads started from here on inherit it

    async def register_samples(_: web.Application) -> None:
        node.faces.register_samples_soon()  # before the first session asks for them

    app.on_startup.append(register_samples)
    # SIGINT/SIGTERM exit gracefully: the node's shutdown hook ends every
    # live session before the server stops; the listener caps connections per address and
    # times request headers (slowloris)
    guard = guard_app(app, connection_limits(config))
    run_guarded(app, guard, host=config.server.host, port=config.server.port, ssl_context=node.tls,
                access_log_class=RedactingAccessLogger)
    return 0
