"""Which push destinations a stream key may name: the node connects to them itself, so a
user's destination must not reach into the operator's network (its Redis, a metadata
service, a router's admin page).

A user's destination host must be on ``allowed_hosts`` (when that is set), and every
address it resolves to must be public, or inside ``allowed_networks``. Checked twice:
``check_new`` when a key is made (a clear 400), and ``resolve`` at every connect, which
also picks the address the client then connects to, so a DNS answer that changes between
the two (rebinding) meets the same rule. Admins' keys and the operator's command-line keys
(no owner) are not restricted. Users' job webhooks (``webhook_url``) meet ``check_new`` at
submission too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from signaling.log_safety import quoted
from signaling.stream_keys import StreamKey, StreamKeyError, StreamKeyStore

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[str]]  # (host, port) -> the address to connect to

_DEFAULT_PORTS = {"rtmp": 1935, "rtmps": 443, "http": 80, "https": 443}
log = logging.getLogger(__name__)


class DestinationRefused(StreamKeyError, PermissionError):
    """A push destination the policy does not allow; a ``PermissionError`` (an ``OSError``)
    too, so a connecting client reports it like any other failure to connect."""


@dataclass(frozen=True)
class Ipv4InIpv6:
    """An IPv6 range whose addresses carry or translate an IPv4 address: a packet sent to
    one reaches an IPv4 host (through the kernel's mapping, a NAT64 or SIIT translator, a
    6to4 or Teredo relay), whichever host the IPv4 part names. ``carried`` reads that IPv4
    address where the range fixes where it sits (None: the operator's translator decides)."""

    network: ipaddress.IPv6Network
    name: str
    carried: Callable[[ipaddress.IPv6Address], ipaddress.IPv4Address | None] | None


def _last_32_bits(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)


# Every range that embeds or translates IPv4, in one table: a user's destination in any of
# them is refused unless push.allowed_networks holds it (or the IPv4 address it carries).
IPV4_IN_IPV6 = tuple(Ipv4InIpv6(ipaddress.IPv6Network(network), name, carried) for network, name, carried in (
    ("::/96", "IPv4-compatible (RFC 4291)", _last_32_bits),
    ("::ffff:0:0/96", "IPv4-mapped (RFC 4291)", _last_32_bits),
    ("::ffff:0:0:0/96", "IPv4-translated, SIIT (RFC 2765)", _last_32_bits),
    ("64:ff9b::/96", "NAT64 well-known prefix (RFC 6052)", _last_32_bits),
    ("64:ff9b:1::/48", "NAT64 local-use prefix (RFC 8215)", None),  # its prefix length is the operator's
    ("2002::/16", "6to4 (RFC 3056)", lambda address: address.sixtofour),
    ("2001::/32", "Teredo (RFC 4380)", lambda address: address.teredo[1] if address.teredo else None),
))


def ipv4_in_ipv6(address: IpAddress) -> Ipv4InIpv6 | None:
    """The range of ``IPV4_IN_IPV6`` that ``address`` is in, if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    return next((entry for entry in IPV4_IN_IPV6 if address in entry.network), None)


def is_public(address: IpAddress) -> bool:
    """A globally routable unicast address (not private, loopback, link-local, shared,
    multicast, unspecified or reserved) that carries no IPv4 address (``IPV4_IN_IPV6``)."""
    return ipv4_in_ipv6(address) is None and address.is_global and not address.is_multicast


@dataclass(frozen=True)
class PushPolicy:
    """The config's ``push`` section as a rule: empty lists = public addresses only."""

    allowed_hosts: tuple[str, ...] = ()
    allowed_networks: tuple[IpNetwork, ...] = ()

    @classmethod
    def from_lists(cls, hosts: Iterable[str], networks: Iterable[str]) -> PushPolicy:
        """From ``push.allowed_hosts`` and ``push.allowed_networks`` (already validated)."""
        return cls(tuple(h.lower().rstrip(".") for h in hosts),
                   tuple(ipaddress.ip_network(n, strict=False) for n in networks))

    @staticmethod
    def exempt(record: StreamKey) -> bool:
        """Keys the policy does not restrict: made by an admin, or on the command line."""
        return not record.owner or record.stream.push_unrestricted

    def check_host(self, host: str, what: str = "push destination") -> None:
        name = host.lower().rstrip(".")
        if self.allowed_hosts and not any(
            name == allowed or (allowed.startswith(".") and name.endswith(allowed)) for allowed in self.allowed_hosts
        ):
            raise DestinationRefused(f"{what} host {host!r} is not in push.allowed_hosts")

    def check_address(self, host: str, address: IpAddress, what: str = "push destination") -> None:
        if self.allows(address):
            return
        shown = host if host == str(address) else f"{host} ({address})"
        translated = ipv4_in_ipv6(address)
        if translated is not None:
            raise DestinationRefused(f"{what} {shown} is an IPv6 address that carries an IPv4 one "
                                     f"({translated.name}), which is not a public address here; "
                                     "the operator can allow it in push.allowed_networks")
        raise DestinationRefused(f"{what} {shown} is not a public address; "
                                 "the operator can allow it in push.allowed_networks")

    def allows(self, address: IpAddress) -> bool:
        """Public, or in ``allowed_networks`` (itself, or the IPv4 address it carries)."""
        if is_public(address) or any(address in net for net in self.allowed_networks):
            return True
        translated = ipv4_in_ipv6(address)
        inner = translated.carried(address) if translated is not None and translated.carried is not None else None
        return inner is not None and any(inner in net for net in self.allowed_networks)

    async def check_new(self, url: str, what: str = "push destination") -> None:
        """At key creation: the host, and every address it resolves to now. A name that does
        not resolve here is let through: the connect-time check decides then."""
        host, port = _host_port(url, what)
        self.check_host(host, what)
        try:
            addresses = await _addresses(host, port)
        except OSError:
            return
        for address in addresses:
            self.check_address(host, address, what)

    async def resolve(self, host: str, port: int) -> str:
        """At connect: the first address of ``host`` the policy allows (the client connects
        to it, not to a second lookup); ``DestinationRefused`` when there is none."""
        self.check_host(host)
        refusal: DestinationRefused | None = None
        for address in await _addresses(host, port):
            try:
                self.check_address(host, address)
            except DestinationRefused as exc:
                refusal = refusal or exc
                continue
            return str(address)
        raise refusal or DestinationRefused(f"push destination {host!r} has no address")

    def resolver(self, store: StreamKeyStore, url: str) -> Resolver:
        """The connect-time ``Resolver`` for ``url``, a destination of keys in ``store``: the
        host as is when every active key pushing there is exempt, else ``resolve``."""

        async def resolve(host: str, port: int) -> str:
            try:  # an indexed read of the keys pushing there, not of the whole store
                records = await store.call(store.pushing_to, url)
            except StreamKeyError:  # an unreadable store exempts nobody
                records = []
            if records and all(self.exempt(record) for record in records):
                return host
            try:
                return await self.resolve(host, port)
            except DestinationRefused as exc:
                log.warning("push %s refused by the push policy: %s", quoted(redacted(url)), exc)
                raise

        return resolve


def redacted(url: str) -> str:
    """``url`` without its stream name (the destination's secret key) for the log."""
    head, _, _ = url.rpartition("/")
    return f"{head}/***" if "://" in head else url


def _host_port(url: str, what: str) -> tuple[str, int]:
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or _DEFAULT_PORTS.get(parts.scheme, 1935)
    except ValueError:
        host = None
    if not host:
        raise StreamKeyError(f"{what} {url!r} names no host")
    return host, port


async def _addresses(host: str, port: int) -> list[IpAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]
