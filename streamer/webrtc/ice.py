"""ICE configuration: STUN/TURN servers and which host addresses are offered to peers.

``config.webrtc.ice_servers`` becomes the ``RTCConfiguration`` of every peer connection.
An empty list means *no* STUN/TURN (aiortc would otherwise fall back to Google's public
STUN server, which a node on a closed network cannot reach and which delays gathering).

``config.webrtc.host_addresses`` restricts the host candidates. aioice gathers them by
calling the module-level ``aioice.ice.get_host_addresses(use_ipv4, use_ipv6)`` (every
interface except loopback) from ``Connection.gather_candidates``; :func:`install` replaces
that one function, process-wide, by one that returns the configured addresses (loopback
allowed, so ``["127.0.0.1"]`` keeps tests and single-machine setups on loopback). An empty
list restores aioice's own behaviour. This is the only place that touches aioice.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

import aioice.ice
from aiortc import RTCConfiguration, RTCIceServer

_original_get_host_addresses = aioice.ice.get_host_addresses
_host_addresses: tuple[str, ...] = ()


def rtc_configuration(ice_servers: Sequence) -> RTCConfiguration:
    """``RTCConfiguration`` from ``config.webrtc.ice_servers`` (objects or dicts with
    ``urls``, ``username``, ``credential``)."""
    servers = []
    for server in ice_servers:
        get = server.get if isinstance(server, dict) else lambda name, s=server: getattr(s, name, None)
        servers.append(RTCIceServer(urls=list(get("urls")), username=get("username"), credential=get("credential")))
    return RTCConfiguration(iceServers=servers)


def configured_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    """Replacement for ``aioice.ice.get_host_addresses`` honouring the configured list."""
    if not _host_addresses:
        return _original_get_host_addresses(use_ipv4=use_ipv4, use_ipv6=use_ipv6)
    chosen = []
    for address in _host_addresses:
        version = ipaddress.ip_address(address).version
        if (version == 4 and use_ipv4) or (version == 6 and use_ipv6):
            chosen.append(address)
    return chosen


def install(host_addresses: Sequence[str]) -> None:
    """Restrict the host candidates of every ICE agent created from now on (empty = all
    interfaces). Raises ``ValueError`` for an address that is not an IP literal."""
    global _host_addresses
    for address in host_addresses:
        ipaddress.ip_address(address)
    _host_addresses = tuple(host_addresses)
    aioice.ice.get_host_addresses = configured_host_addresses
