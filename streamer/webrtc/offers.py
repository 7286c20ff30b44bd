"""Checking a peer's SDP offer before any peer connection exists, so that a malformed or
video-less offer costs nothing and gets a 400 with a reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from aiortc import sdp

from signaling.numbers import has_foreign_digits
from streamer.webrtc.errors import BadRequestError

MAX_SDP_BYTES = 64 * 1024
MAX_MEDIA_SECTIONS = 4  # a browser offers video, audio and maybe a data channel; more only costs us transceivers
# a peer's ICE candidates, in its offer and trickled each: every one is paired with ours and
# checked with packets sent to its address (any address): browsers send a handful
MAX_REMOTE_CANDIDATES = 32

Need = Literal["send", "receive"]  # the peer must send video to us / receive video from us


@dataclass(frozen=True)
class Offer:
    sdp: str
    video_direction: str  # the peer's direction for its (first) video m-line
    audio_direction: str | None  # None: no audio m-line

    @property
    def peer_sends_video(self) -> bool:
        return self.video_direction in ("sendrecv", "sendonly")

    @property
    def peer_receives_video(self) -> bool:
        return self.video_direction in ("sendrecv", "recvonly")

    @property
    def peer_sends_audio(self) -> bool:
        return self.audio_direction in ("sendrecv", "sendonly")

    @property
    def peer_receives_audio(self) -> bool:
        return self.audio_direction in ("sendrecv", "recvonly")


ICE_CANDIDATE_TYPES = ("host", "srflx", "prflx", "relay")  # RFC 8445


def parse_offer(text: object, need: Need) -> Offer:
    if not isinstance(text, str) or not text.strip():
        raise BadRequestError("the offer SDP is missing or empty")
    if len(text) > MAX_SDP_BYTES:
        raise BadRequestError(f"the offer SDP is over {MAX_SDP_BYTES // 1024} KiB")
    if not text.lstrip().startswith("v=0"):
        raise BadRequestError("malformed SDP: an offer starts with 'v=0'")
    if has_foreign_digits(text):  # aiortc reads its numbers with int(), which takes '٩٦' for 96
        raise BadRequestError("malformed SDP: numbers must be written in ASCII digits 0-9")
    try:
        description = sdp.SessionDescription.parse(text)
    except Exception as exc:  # aiortc's parser raises whatever the bad line triggers
        raise BadRequestError(f"malformed SDP: {exc or type(exc).__name__}") from None
    if len(description.media) > MAX_MEDIA_SECTIONS:
        raise BadRequestError(f"the offer has {len(description.media)} media sections; at most {MAX_MEDIA_SECTIONS} are taken")
    mids = [m.rtp.muxId for m in description.media if m.rtp.muxId]
    if len(mids) != len(set(mids)):
        raise BadRequestError("malformed SDP: two media sections have the same a=mid")
    bundle = next((group.items for group in description.group if group.semantic == "BUNDLE"), None)
    if bundle is not None and (len(mids) != len(description.media) or set(bundle) != set(mids)):
        # aiortc answers such an offer with a section that has no transport, then fails
        raise BadRequestError("malformed SDP: a=group:BUNDLE must name exactly the media sections' a=mid values")
    offered = [c for m in description.media for c in m.ice_candidates]
    if len(offered) > MAX_REMOTE_CANDIDATES:
        raise BadRequestError(f"the offer has {len(offered)} ICE candidates; at most {MAX_REMOTE_CANDIDATES} are taken")
    for candidate in offered:
        # aioice drops other types itself but logs them through a format string that a
        # stray "%" in the candidate breaks (a logging traceback per candidate)
        if candidate.type not in ICE_CANDIDATE_TYPES or "%" in candidate.ip:
            raise BadRequestError(f"malformed SDP: an a=candidate must be of type {', '.join(ICE_CANDIDATE_TYPES)} "
                                  "with a plain address or .local name")
    video = [m for m in description.media if m.kind == "video" and m.port != 0]
    audio = [m for m in description.media if m.kind == "audio" and m.port != 0]
    if not video:
        raise BadRequestError("the offer has no video; add a video track (or transceiver) before creating the offer")
    first = video[0]
    if not first.rtp.codecs:
        raise BadRequestError("the offer's video has no codecs")
    offer = Offer(text, first.direction or "sendrecv", (audio[0].direction or "sendrecv") if audio else None)
    if need == "send" and not offer.peer_sends_video:
        raise BadRequestError(f"the offer's video is {offer.video_direction}; the peer must send video to be swapped")
    if need == "receive" and not offer.peer_receives_video:
        raise BadRequestError(f"the offer's video is {offer.video_direction}; a viewer must receive video (recvonly)")
    return offer  # ICE credentials, fingerprints and codecs are checked by setRemoteDescription
