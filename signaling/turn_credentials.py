"""Time-limited TURN credentials: coturn's "TURN REST API" scheme (``use-auth-secret`` with
``static-auth-secret``; draft-uberti-behave-turn-rest).

The API and the TURN server share one secret. For each session the API hands the browser
``username = "<unix expiry>:<user>"`` and ``credential = base64(HMAC-SHA1(secret, username))``;
the TURN server recomputes the HMAC and refuses the pair once the expiry has passed. So a
client only ever holds a credential that dies on its own, never the secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


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
        # ':' separates expiry and user in coturn's scheme: keep it out of the user part
        username = f"{expiry}:{user.replace(':', '_') or 'anonymous'}"
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
