"""Time-limited TURN credentials: coturn's "TURN REST API" scheme (``use-auth-secret`` with
``static-auth-secret``; draft-uberti-behave-turn-rest).

The API and the TURN server share one secret. For each session the API hands the browser
``username = "<unix expiry>:<user>"`` and ``credential = base64(HMAC-SHA1(secret, username))``;
the TURN server recomputes the HMAC and refuses the pair once the expiry has passed. So a
client only ever holds a credential that dies on its own, never the secret.

Browsers get these as ``RTCIceServer`` dicts in the session answer; WHIP/WHEP clients (OBS,
GStreamer) as RFC 9725 ``Link: <url>; rel="ice-server"`` headers (``ice_server_links``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


# ':' ends coturn's expiry; the rest keeps the name a header-safe token that WHIP clients
# which do not unescape quoted-strings (OBS) still read right
_UNSAFE_USER = re.compile(r'[^\x21-\x7e]|[:"\\]')


def turn_password(secret: str, username: str) -> str:
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True)
class TurnCredentials:
    """Mints ``RTCIceServer`` dicts for ``urls`` valid ``ttl_s`` from now."""

    urls: tuple[str, ...]
    secret: str = field(repr=False)
    ttl_s: int = 3600
    clock: Callable[[], float] = time.time

    @classmethod
    def from_config(cls, webrtc) -> TurnCredentials | None:
        """From ``config.webrtc`` (``turn_urls``, ``turn_shared_secret``, ``turn_ttl_s``);
        None when no TURN is configured."""
        if not webrtc.turn_urls:
            return None
        return cls(tuple(webrtc.turn_urls), webrtc.turn_shared_secret, webrtc.turn_ttl_s)

    def ice_server(self, user: str) -> dict:
        expiry = int(self.clock()) + self.ttl_s
        username = f"{expiry}:{_UNSAFE_USER.sub('_', user) or 'anonymous'}"
        return {"urls": list(self.urls), "username": username, "credential": turn_password(self.secret, username)}


def browser_ice_servers(ice_servers: Sequence, turn: TurnCredentials | None, user: str) -> list[dict]:
    """What a browser gets with its session: the configured STUN servers (servers with a
    credential are the node's own and stay on it) plus freshly minted TURN credentials."""
    public = []
    for server in ice_servers:
        get = server.get if isinstance(server, dict) else lambda name, s=server: getattr(s, name, None)
        if not get("credential"):
            public.append({"urls": list(get("urls"))})
    return [*public, turn.ice_server(user)] if turn is not None else public


def _quoted(value: str) -> str:
    """An RFC 9110 quoted-string."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ice_server_links(servers: Sequence[dict]) -> list[str]:
    """``Link`` header values for a WHIP/WHEP 201 (RFC 9725 section 4.6): one per server URL,
    ``<url>; rel="ice-server"``, plus ``username``, ``credential`` and ``credential-type`` for
    a TURN server with credentials (as OBS and GStreamer's whip clients read them)."""
    links = []
    for server in servers:
        urls = server["urls"]
        for url in [urls] if isinstance(urls, str) else urls:
            link = f'<{url}>; rel="ice-server"'
            if server.get("credential"):
                link += (f'; username={_quoted(server.get("username", ""))}; credential={_quoted(server["credential"])}'
                         '; credential-type="password"')
            links.append(link)
    return links
