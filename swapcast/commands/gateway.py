"""``swapcast gateway``: the one address clients use in front of several nodes (``swapcast
serve --redis URL --advertise HOST:PORT``), sharing their Redis registry."""

from __future__ import annotations

import argparse

from swapcast.commands.common import add_tls_flags, tls_overrides
from swapcast.config import Config, ConfigError, load_config, redacted_url


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("gateway", help="run the gateway in front of several nodes (needs Redis)")
    parser.add_argument("--redis", metavar="URL", help="the nodes' registry: redis://host:port/db, or redis+cluster://host:port[,host:port...] (config: cluster.redis_url)")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="HTTP port (default 8080)")
    parser.add_argument("--rtmp-port", type=int, help="RTMP port relayed to the nodes (default 1935, 0 = any free)")
    # also accepted after the command; SUPPRESS keeps a --config given before it
    parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help="YAML config file")
    add_tls_flags(parser)
    parser.set_defaults(run=run)


def gateway_config(args: argparse.Namespace) -> Config:
    """Defaults < config file < environment < flags; a gateway without Redis is an error."""
    tls = tls_overrides(args)
    config = load_config(args.config, overrides={
        "server": {"host": args.host, "port": args.port},
        "rtmp": {"port": args.rtmp_port, **tls["rtmp"]},
        "tls": tls["tls"],
        "cluster": {"redis_url": args.redis},
    })
    if not config.cluster.redis_url:
        raise ConfigError("a gateway needs the nodes' registry: pass --redis redis://HOST:PORT/0 (or set cluster.redis_url)")
    return config


def run(args: argparse.Namespace) -> int:
    import uvloop
    from aiohttp import web

    from signaling.auth.wiring import api_auth
    from signaling.connection_limits import guard_app, run_guarded
    from signaling.gateway import RTMP_SERVER_KEY, GatewaySettings, build_gateway_app
    from signaling.registry import open_registry
    from swapcast.app import connection_limits, is_public, node_tls_context, serve_tls
    from swapcast.logs import RedactingAccessLogger

    config = gateway_config(args)
    tls = node_tls_context(config)  # a bad certificate: one line naming the file
    host, port = config.server.host, config.server.port
    auth = api_auth(config.auth, host=host, cluster=True, data_dir=config.server.data_dir, is_public=is_public)
    registry = open_registry(config.cluster.redis_url, ttl_s=config.cluster.node_ttl_s)
    app = build_gateway_app(registry, GatewaySettings(
        rtmp_host=host, rtmp_port=config.rtmp.port, rtmp_stall_timeout_s=config.rtmp.stall_timeout_s,
        rtmp_tls=tls if config.rtmp.tls_port is not None else None, rtmp_tls_port=config.rtmp.tls_port or 0,
        rtmp_setup_timeout_s=config.rtmp.setup_timeout_s, rtmp_max_pending_per_ip=config.rtmp.max_pending_per_ip,
        cors_origins=tuple(config.server.cors_origins), event_sockets_per_user=config.quotas.event_sockets_per_user,
    ), auth)
    serve_tls(app, tls, config)
    scheme = "https" if tls else "http"

    def announce() -> None:
        rtmp = app[RTMP_SERVER_KEY]
        rtmps = f" and rtmps://{host}:{rtmp.tls_port}/live/<stream key>" if rtmp.tls_port is not None else ""
        print(
            f"swapcast gateway on {scheme}://{host}:{port}/ and rtmp://{host}:{rtmp.port}/live/<stream key>{rtmps}, "
            f"registry {redacted_url(config.cluster.redis_url)} (Ctrl+C stops)",
            flush=True,
        )

    async def close_registry(_: web.Application) -> None:
        await registry.close()

    app.on_cleanup.append(close_registry)
    uvloop.install()
    # announce once every listener is up; SIGINT/SIGTERM exit gracefully: the RTMP relay and
    # the reaper stop, then the registry closes. The listener caps connections per address
    # and times request headers (slowloris)
    guard = guard_app(app, connection_limits(config))
    run_guarded(app, guard, host=host, port=port, ssl_context=tls, announce=announce,
                access_log_class=RedactingAccessLogger)
    return 0
