"""Who a client is, for the bounds kept per client (connection caps, rate limits) and for
matching trusted proxies: one person must not count as many, nor slip past a CIDR.

- A dual-stack socket (``::``) shows an IPv4 peer as ``::ffff:10.0.0.1``: that is
  ``10.0.0.1``, in ``10.0.0.0/8`` and in the same bucket as the plain form.
- An IPv6 subscriber gets a whole /64 (2**64 addresses) and picks any of them per
  connection, so an IPv6 client is counted by its /64; IPv4 by the address.
- A zone (``fe80::1%eth0``) is not part of the address."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPV6_CLIENT_PREFIX = 64


def parse_ip(address: str) -> IpAddress | None:
    """The address as IPv4 when it is an IPv4-mapped IPv6 one; None when it is no IP (a
    Unix socket, ``unknown``)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def client_key(address: str) -> str:
    """The key one client's connections and requests are counted under: an IPv4 address
    (mapped or not), an IPv6 /64, or the text itself when it is no IP."""
    ip = parse_ip(address)
    if ip is None:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, IPV6_CLIENT_PREFIX), strict=False))
    return str(ip)


def parse_networks(networks: Iterable[str]) -> tuple[IpNetwork, ...]:
    """Addresses or CIDRs; an IPv4-mapped one (``::ffff:10.0.0.0/104``) as its IPv4 network."""
    parsed: list[IpNetwork] = []
    for text in networks:
        net = ipaddress.ip_network(text, strict=False)
        mapped = net.network_address.ipv4_mapped if isinstance(net, ipaddress.IPv6Network) else None
        if mapped is not None and net.prefixlen >= 96:
            net = ipaddress.IPv4Network((mapped, net.prefixlen - 96))
        parsed.append(net)
    return tuple(parsed)


def in_networks(address: str, networks: tuple[IpNetwork, ...]) -> bool:
    """Whether ``address`` (an IPv4-mapped one as IPv4) lies in one of ``networks``."""
    ip = parse_ip(address)
    return ip is not None and any(ip in net for net in networks)
