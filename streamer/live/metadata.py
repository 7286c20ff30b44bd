"""The ``onMetaData`` a swapped RTMP stream goes out with: the node's own video, the
publisher's audio.

The video is the node's encode (its size, codec and bitrate, encoder ``swapcast``), not
what the publisher's encoder made, so platforms and players must not be told the
publisher's encoder name, bitrate or size. The audio passes through untouched, so its
fields are the publisher's."""

from __future__ import annotations

from typing import Any

from streamer.media.picture_limits import h264_sps_size
from streamer.rtmp import amf0
from streamer.rtmp.flv import parse_avc_decoder_config
from streamer.rtmp.handler import MediaMessage

ENCODER = "swapcast"
AVC_CODEC_ID = 7.0
# the publisher's fields that describe the audio (passed through as it sent them)
AUDIO_FIELDS = ("audiocodecid", "audiodatarate", "audiosamplerate", "audiosamplesize", "stereo", "audiochannels")


def node_metadata(video_header: bytes, bitrate_kbps: float, published: dict[str, Any] | None) -> MediaMessage:
    """``onMetaData`` for the node's encode whose avcC is ``video_header``: its picture size
    (from the SPS), H.264, the encoder's bitrate, the publisher's frame rate (every frame
    keeps its time) and the publisher's audio fields."""
    published = published or {}
    size = h264_sps_size(parse_avc_decoder_config(video_header).sps[0])
    values: dict[str, Any] = {
        "width": float(size.width),
        "height": float(size.height),
        "videocodecid": AVC_CODEC_ID,
        "videodatarate": float(bitrate_kbps),
        "encoder": ENCODER,
    }
    rate = published.get("framerate")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0:
        values["framerate"] = float(rate)
    values.update({name: published[name] for name in AUDIO_FIELDS if name in published})
    return MediaMessage("data", 0, amf0.encode("onMetaData", amf0.EcmaArray(values)))
