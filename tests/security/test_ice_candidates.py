"""A peer's ICE candidates are bounded per session: each one is paired with the node's own and
checked with STUN packets sent to its address, whatever that address is, so thousands of
them made a node spray packets across any network it reaches (and grew its check list)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from streamer.webrtc.errors import BadRequestError
from streamer.webrtc.manager import SessionManager
from streamer.webrtc.offers import MAX_REMOTE_CANDIDATES, parse_offer
from swapcast.config import SwapConfig, WebRtcConfig

OFFER_HEAD = ("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0\r\n"
              "m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=sendrecv\r\na=rtcp-mux\r\n"
              "a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n"
              "a=fingerprint:sha-256 " + ":".join(["AB"] * 32) + "\r\na=setup:actpass\r\na=rtpmap:96 VP8/90000\r\n")


def candidate(number: int) -> str:
    return f"candidate:{number} 1 udp 2122260223 10.{number // 250}.{number % 250}.1 {9000 + number} typ host"


def test_an_offer_with_more_candidates_than_a_peer_needs_is_refused():
    lines = "".join(f"a={candidate(n)}\r\n" for n in range(MAX_REMOTE_CANDIDATES + 1))
    with pytest.raises(BadRequestError, match="ICE candidates"):
        parse_offer(OFFER_HEAD + lines, need="send")
    parse_offer(OFFER_HEAD + "".join(f"a={candidate(n)}\r\n" for n in range(MAX_REMOTE_CANDIDATES)), need="send")


def test_trickled_candidates_are_bounded_per_session():
    class CountingPeer:
        added = 0

        async def addIceCandidate(self, _candidate) -> None:
            self.added += 1

    manager = SessionManager(None, None, webrtc=WebRtcConfig(), swap_defaults=SwapConfig())
    session = SimpleNamespace(pc=CountingPeer(), remote_candidates=0, protocol="webrtc")
    manager._sessions["s1"] = session

    async def trickle(count: int) -> list[str]:
        refused = []
        for n in range(count):
            try:
                await manager.add_candidate("s1", {"candidate": candidate(n), "sdpMid": "0"})
            except BadRequestError as exc:
                refused.append(str(exc))
        return refused

    refused = asyncio.run(trickle(MAX_REMOTE_CANDIDATES + 100))
    assert session.pc.added == MAX_REMOTE_CANDIDATES
    assert len(refused) == 100 and "ICE candidates" in refused[0]
