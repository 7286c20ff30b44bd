"""stream_guard: a file's video stream is refused by its container's size, then checked
packet by packet by its codec's header reader (H.264, HEVC, VP8, VP9, AV1); a codec whose
headers are not read passes to a decoder bounded by ``max_pixels``."""

from __future__ import annotations

import av
import pytest
from test_av1_sequence import av1_packets
from test_hevc_sps import sps_of, with_sps, x265_packets
from test_picture_limits import sps_of as h264_sps_of
from test_picture_limits import vp8_packets, x264_packets
from test_picture_limits import with_sps as h264_with_sps
from test_vp9_header import vp9_packets

from streamer.media.picture_limits import FrameSizeError
from streamer.media.stream_guard import MAX_DECODED_PIXELS, bound_decoder, video_stream_guard
from swapcast.benchmarks.fuzz.picture_bombs import (
    resize_av1_temporal_unit,
    resize_hevc_sps,
    resize_sps,
    resize_vp8_keyframe,
    resize_vp9_frame,
)


def test_a_files_stream_is_refused_by_its_container_size_then_checked_packet_by_packet():
    with pytest.raises(FrameSizeError, match="the video stream declares 8192x4320 pictures"):
        video_stream_guard("hevc", 8192, 4320, None)
    h264 = x264_packets(64, 64, "yuv420p", {"preset": "ultrafast"})
    hevc, vp9, av1 = x265_packets(64, 64, "yuv420p"), vp9_packets(64, 48), av1_packets(64, 64)
    crafted = {
        "h264": (h264, h264_with_sps(h264, resize_sps(h264_sps_of(h264), 1000, 1000))[0]),
        "hevc": (hevc, with_sps(hevc[0], resize_hevc_sps(sps_of(hevc), 16000, 16000))),
        "vp8": (vp8_packets(64, 64), resize_vp8_keyframe(vp8_packets(64, 64)[0], 16383, 16383)),
        "vp9": (vp9, resize_vp9_frame(vp9[0], 16000, 16000)),
        "libdav1d": (av1, resize_av1_temporal_unit(av1[0], 16000, 16000)),
    }
    for codec, (packets, bomb) in crafted.items():
        check = video_stream_guard(codec, 64, 64, None)
        for packet in packets:
            check(packet)
        with pytest.raises(FrameSizeError, match=r"declares 16(000|383)x16(000|383) pictures"):
            check(bomb)
    video_stream_guard("mpeg4", 64, 64, None)(b"anything")  # a codec whose headers are not read here


def test_a_bounded_decoder_opens_with_max_pixels_and_keeps_its_other_options():
    context = av.CodecContext.create("h264", "r")
    context.options = {"flags2": "+showall"}
    bound_decoder(context)
    assert context.options == {"flags2": "+showall", "max_pixels": str(MAX_DECODED_PIXELS)}
    assert MAX_DECODED_PIXELS == 4096 * 4096
