"""In-project asyncio RTMP stack (server, publish/play clients), layered like MediaMTX's:
handshake → chunk stream → messages → AMF0 commands → FLV tag bodies → connection → server.

Written in-house because pyrtmp hangs on stalled publishers and PyAV's listen mode takes a
single publisher only."""

from streamer.rtmp.client import RtmpClientError, RtmpPlayClient, RtmpPublishClient
from streamer.rtmp.errors import RtmpProtocolError
from streamer.rtmp.server import (
    MediaMessage,
    Player,
    Publisher,
    PublishRejected,
    RtmpHandler,
    RtmpServer,
)

__all__ = [
    "MediaMessage",
    "Player",
    "PublishRejected",
    "Publisher",
    "RtmpClientError",
    "RtmpHandler",
    "RtmpPlayClient",
    "RtmpProtocolError",
    "RtmpPublishClient",
    "RtmpServer",
]
