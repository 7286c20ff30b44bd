"""The gateway: the one address clients know in front of several nodes. It places sessions
through the registry, forwards HTTP (REST, WebRTC offers, WHIP, WHEP) to each session's node
and relays RTMP publishers and players to theirs (see ``app`` and ``rtmp_relay``)."""

from signaling.gateway.app import RTMP_SERVER_KEY, GatewaySettings, build_gateway_app
from signaling.gateway.rtmp_relay import RtmpRelay

__all__ = ["RTMP_SERVER_KEY", "GatewaySettings", "RtmpRelay", "build_gateway_app"]
