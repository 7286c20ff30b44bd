"""The largest picture an AV1 sequence header allows, read before dav1d sees it.

dav1d sizes its frames from each frame header, but never past the sequence header's
``max_frame_width_minus_1``/``max_frame_height_minus_1`` (AV1 5.5.1), so those bound the
stream: they are checked in the av1C extradata's configOBUs and in every sample's OBUs
(a sequence header may come again in-band, and the decoder takes a new one)."""

from __future__ import annotations

from streamer.media.picture_limits import DeclaredSize, RbspBits, UnreadableHeader

_SEQUENCE_HEADER = 1  # obu_type OBU_SEQUENCE_HEADER
_MAX_HEADER_BYTES = 1024  # the fields up to the maximum size: under 300 bytes with 32 operating points
LABEL = "AV1 sequence header"


def av1_sequence_size(payload: bytes) -> DeclaredSize:
    """The largest picture a sequence header OBU's payload (after its OBU header and size)
    allows; ``UnreadableHeader`` when it ends before that."""
    bits = RbspBits(payload[:_MAX_HEADER_BYTES], LABEL)
    bits.skip(4)  # seq_profile, still_picture
    if bits.u(1):  # reduced_still_picture_header
        bits.skip(5)  # seq_level_idx[0]
    else:
        decoder_model, delay_length = False, 0
        if bits.u(1):  # timing_info_present_flag
            bits.skip(64)  # num_units_in_display_tick, time_scale
            if bits.u(1):  # equal_picture_interval
                _skip_uvlc(bits)  # num_ticks_per_picture_minus_1
            decoder_model = bool(bits.u(1))  # decoder_model_info_present_flag
            if decoder_model:
                delay_length = bits.u(5) + 1  # buffer_delay_length_minus_1
                bits.skip(32 + 5 + 5)  # num_units_in_decoding_tick, two more lengths
        display_delay = bits.u(1)  # initial_display_delay_present_flag
        for _ in range(bits.u(5) + 1):  # operating_points_cnt_minus_1
            bits.skip(12)  # operating_point_idc
            if bits.u(5) > 7:  # seq_level_idx
                bits.skip(1)  # seq_tier
            if decoder_model and bits.u(1):  # decoder_model_present_for_this_op
                bits.skip(2 * delay_length + 1)  # operating_parameters_info
            if display_delay and bits.u(1):  # initial_display_delay_present_for_this_op
                bits.skip(4)
    width_bits, height_bits = bits.u(4) + 1, bits.u(4) + 1
    width, height = bits.u(width_bits) + 1, bits.u(height_bits) + 1
    return DeclaredSize(width, height, width, height)


def _skip_uvlc(bits: RbspBits) -> None:
    zeros = 0
    while not bits.u(1):
        zeros += 1
        if zeros >= 32:
            return  # the value is then (1 << 32) - 1 with nothing more read (4.10.3)
    bits.skip(zeros)


def check_av1_obus(data: bytes) -> None:
    """``FrameSizeError`` for a sequence header among the OBUs of ``data`` (a sample, or an
    av1C's configOBUs) allowing a size the node does not take; ``UnreadableHeader`` for one
    that cannot be read. OBUs past one whose size overruns ``data`` are never read."""
    pos = 0
    while pos < len(data):
        header = data[pos]
        pos += 1
        if header & 0x04:  # obu_extension_flag
            pos += 1
        if header & 0x02:  # obu_has_size_field
            size, pos = _leb128(data, pos)
        else:
            size = len(data) - pos
        if pos + size > len(data):
            return
        if (header >> 3) & 0x0F == _SEQUENCE_HEADER:
            av1_sequence_size(data[pos:pos + size]).check(f"the stream's {LABEL}")
        pos += size


def _leb128(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for index in range(8):
        if pos >= len(data):
            raise UnreadableHeader("the stream's AV1 OBU size ends early")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            break
    return value, pos


class Av1SizeGuard:
    """Checks every sequence header of one AV1 stream: the av1C extradata's configOBUs (after
    its 4 fixed bytes) or raw OBUs as extradata, then those in each sample."""

    def __init__(self, extradata: bytes = b"") -> None:
        check_av1_obus(extradata[4:] if extradata[:1] and extradata[0] & 0x80 else extradata)

    def check(self, sample: bytes) -> None:
        check_av1_obus(sample)
