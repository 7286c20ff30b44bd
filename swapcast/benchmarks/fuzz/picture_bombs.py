"""Streams whose headers declare pictures far larger than they carry: a real H.264 SPS
rewritten to another size (the rest of the stream left as it was, so its slices still
decode against it) and a VP8 keyframe whose 14-bit sides are rewritten. A decoder given
one allocates the declared size (and references of it) before any frame comes out.
The same for HEVC (an SPS, alone or in an hvcC, optionally with a larger DPB), VP9 (the
16-bit sides of a keyframe or intra-only frame, also inside a superframe) and AV1 (a
sequence header's maximum frame size, alone, in an av1C or in a temporal unit).

The grammars are written out here on their own rather than borrowed from
``streamer.media.picture_limits``: the tests that parse with one and craft with the other
then check each against the other."""

from __future__ import annotations

from streamer.rtmp.flv import avc_decoder_config, parse_avc_decoder_config

_HIGH_PROFILES = frozenset({100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135})


class _BitCopier:
    """Reads an RBSP (or another header) bit by bit and writes what it reads (or a
    replacement) to a new one."""

    def __init__(self, rbsp: bytes) -> None:
        self.bits = "".join(f"{byte:08b}" for byte in rbsp)
        self.pos = 0
        self.out: list[str] = []

    def read(self, count: int) -> int:
        field = self.bits[self.pos:self.pos + count]
        if len(field) < count:
            raise ValueError("the header ends inside a field")
        self.pos += count
        return int(field, 2) if count else 0

    def read_ue(self) -> int:
        zeros = 0
        while self.read(1) == 0:
            zeros += 1
        return (1 << zeros) - 1 + self.read(zeros)

    def copy(self, count: int) -> int:
        start = self.pos
        value = self.read(count)
        self.out.append(self.bits[start:self.pos])
        return value

    def copy_ue(self) -> int:
        start = self.pos
        value = self.read_ue()
        self.out.append(self.bits[start:self.pos])
        return value

    def copy_se(self) -> None:
        self.copy_ue()

    def write(self, value: int, count: int) -> None:
        self.out.append(f"{value:0{count}b}")

    def write_ue(self, value: int) -> None:
        code = f"{value + 1:b}"
        self.out.append("0" * (len(code) - 1) + code)

    def copy_rest(self) -> bytes:
        """The remaining bits up to the stop bit, a new stop bit and byte alignment."""
        rest = self.bits[self.pos:].rstrip("0")[:-1]
        bits = "".join(self.out) + rest + "1"
        bits += "0" * (-len(bits) % 8)
        return bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))


def _unescape(payload: bytes) -> bytes:
    return payload.replace(b"\x00\x00\x03", b"\x00\x00")


def _escape(rbsp: bytes) -> bytes:
    """Emulation prevention: a 03 after every 00 00 that comes before a byte of 0 to 3."""
    out, zeros = bytearray(), 0
    for byte in rbsp:
        if zeros >= 2 and byte <= 3:
            out.append(3)
            zeros = 0
        out.append(byte)
        zeros = zeros + 1 if byte == 0 else 0
    return bytes(out)


def resize_sps(sps: bytes, width_mbs: int, height_map_units: int) -> bytes:
    """The SPS NAL unit with pic_width_in_mbs_minus1 + 1 = ``width_mbs`` and
    pic_height_in_map_units_minus1 + 1 = ``height_map_units``; every other field kept."""
    bits = _BitCopier(_unescape(sps[1:]))
    profile = bits.copy(8)
    bits.copy(16)  # constraint flags, level
    bits.copy_ue()  # seq_parameter_set_id
    if profile in _HIGH_PROFILES:
        chroma = bits.copy_ue()
        if chroma == 3:
            bits.copy(1)
        bits.copy_ue()
        bits.copy_ue()
        bits.copy(1)
        if bits.copy(1):  # seq_scaling_matrix_present_flag
            for index in range(12 if chroma == 3 else 8):
                if bits.copy(1):
                    last = following = 8
                    for _ in range(16 if index < 6 else 64):
                        if following:
                            delta = bits.copy_ue()
                            delta = (delta + 1) // 2 if delta % 2 else -(delta // 2)
                            following = (last + delta + 256) % 256
                        last = following or last
    bits.copy_ue()  # log2_max_frame_num_minus4
    order = bits.copy_ue()
    if order == 0:
        bits.copy_ue()
    elif order == 1:
        bits.copy(1)
        bits.copy_se()
        bits.copy_se()
        for _ in range(bits.copy_ue()):
            bits.copy_se()
    bits.copy_ue()  # max_num_ref_frames
    bits.copy(1)
    bits.read_ue()
    bits.write_ue(width_mbs - 1)
    bits.read_ue()
    bits.write_ue(height_map_units - 1)
    return sps[:1] + _escape(bits.copy_rest())


def resize_avcc(record: bytes, width_mbs: int, height_map_units: int) -> bytes:
    """An avcC (RTMP's AVC sequence header) whose first SPS is resized, with its first PPS."""
    config = parse_avc_decoder_config(record)
    return avc_decoder_config(resize_sps(config.sps[0], width_mbs, height_map_units), config.pps[0])


def resize_vp8_keyframe(frame: bytes, width: int, height: int) -> bytes:
    """A VP8 keyframe whose header declares ``width`` x ``height`` (14 bits each, scaling kept)."""
    if frame[0] & 1 or frame[3:6] != b"\x9d\x01\x2a":
        raise ValueError("not a VP8 keyframe")
    sides = b"".join(((side & 0x3FFF) | (int.from_bytes(frame[at:at + 2], "little") & 0xC000)).to_bytes(2, "little")
                     for side, at in ((width, 6), (height, 8)))
    return frame[:6] + sides + frame[10:]


def _copy_hevc_profile_tier_level(bits: _BitCopier, max_sub_layers_minus1: int) -> None:
    """H.265 7.3.3 with profilePresentFlag = 1: the general profile and level, then those
    of the sub-layers that say they carry one."""
    bits.copy(88 + 8)  # general profile (space .. inbld/reserved flag), general_level_idc
    present = [(bits.copy(1), bits.copy(1)) for _ in range(max_sub_layers_minus1)]
    if max_sub_layers_minus1:
        bits.copy(2 * (8 - max_sub_layers_minus1))  # reserved_zero_2bits
    for profile_present, level_present in present:
        bits.copy(88 * profile_present + 8 * level_present)


def resize_hevc_sps(sps: bytes, width: int, height: int, *, dpb: int | None = None) -> bytes:
    """The HEVC SPS NAL unit with pic_width/height_in_luma_samples = ``width`` x ``height``
    (the conformance window kept, so a decoder crops it off again) and, given ``dpb``,
    every sps_max_dec_pic_buffering_minus1 = ``dpb`` - 1; every other field kept."""
    if (sps[0] >> 1) & 0x3F != 33 or (sps[0] & 1) << 5 | sps[1] >> 3:
        raise ValueError("not a base layer HEVC SPS")
    bits = _BitCopier(_unescape(sps[2:]))
    bits.copy(4)  # sps_video_parameter_set_id
    sub_layers_minus1 = bits.copy(3)
    bits.copy(1)  # sps_temporal_id_nesting_flag
    _copy_hevc_profile_tier_level(bits, sub_layers_minus1)
    bits.copy_ue()  # sps_seq_parameter_set_id
    if bits.copy_ue() == 3:  # chroma_format_idc
        bits.copy(1)  # separate_colour_plane_flag
    bits.read_ue()
    bits.write_ue(width)
    bits.read_ue()
    bits.write_ue(height)
    if dpb is not None:
        if bits.copy(1):  # conformance_window_flag
            for _ in range(4):
                bits.copy_ue()
        for _ in range(3):  # bit depths, log2_max_pic_order_cnt_lsb_minus4
            bits.copy_ue()
        every_sub_layer = bits.copy(1)  # sps_sub_layer_ordering_info_present_flag
        for _ in range(sub_layers_minus1 + 1 if every_sub_layer else 1):
            bits.read_ue()
            bits.write_ue(dpb - 1)
            bits.copy_ue()  # sps_max_num_reorder_pics
            bits.copy_ue()  # sps_max_latency_increase_plus1
    return sps[:2] + _escape(bits.copy_rest())


def resize_hvcc(record: bytes, width: int, height: int) -> bytes:
    """An hvcC (ISO/IEC 14496-15 8.3.3) with every SPS resized; the rest kept byte for byte."""
    out, at = bytearray(record[:23]), 23
    for _ in range(record[22]):  # numOfArrays
        nal_type, count = record[at] & 0x3F, int.from_bytes(record[at + 1:at + 3], "big")
        out += record[at:at + 3]
        at += 3
        for _ in range(count):
            length = int.from_bytes(record[at:at + 2], "big")
            nal = record[at + 2:at + 2 + length]
            if len(nal) < length:
                raise ValueError("the hvcC ends inside a NAL unit")
            at += 2 + length
            if nal_type == 33:
                nal = resize_hevc_sps(nal, width, height)
            out += len(nal).to_bytes(2, "big") + nal
    return bytes(out + record[at:])


def _vp9_size_at(frame: bytes) -> int | None:
    """The bit offset of frame_width_minus_1 in a VP9 uncompressed header (spec 6.2), or
    None when the frame has no size of its own (an inter frame or show_existing_frame)."""
    bits = _BitCopier(frame[:16])  # the size ends by bit 84 at the latest
    if bits.read(2) != 2:
        raise ValueError("not a VP9 frame")
    low, high = bits.read(1), bits.read(1)
    profile = high << 1 | low
    if profile == 3:
        bits.read(1)  # reserved_zero
    if bits.read(1):  # show_existing_frame
        return None
    key, shown, error_resilient = bits.read(1) == 0, bits.read(1), bits.read(1)
    if not key:
        intra_only = 0 if shown else bits.read(1)
        if not intra_only:
            return None
        if not error_resilient:
            bits.read(2)  # reset_frame_context
    if bits.read(24) != 0x498342:
        raise ValueError("a VP9 frame without its sync code")
    if key or profile:  # color_config (an intra-only frame of profile 0 has none)
        if profile >= 2:
            bits.read(1)  # ten_or_twelve_bit
        if bits.read(3) != 7:  # color_space other than CS_RGB
            bits.read(1)  # color_range
            if profile in (1, 3):
                bits.read(3)  # subsampling_x, subsampling_y, reserved_zero
        elif profile in (1, 3):
            bits.read(1)  # reserved_zero
    if not key:
        bits.read(8)  # refresh_frame_flags
    at = bits.pos
    bits.read(32)  # frame_width_minus_1, frame_height_minus_1
    return at


def _vp9_frames(packet: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each frame in a packet: the frames a superframe index (Annex B)
    lists, or the packet itself."""
    marker = packet[-1] if packet else 0
    size_bytes, count = (marker >> 3 & 3) + 1, (marker & 7) + 1
    index = 2 + size_bytes * count
    if marker & 0xE0 != 0xC0 or len(packet) < index or packet[-index] != marker:
        return [(0, len(packet))]
    frames, at = [], 0
    for start in range(len(packet) - index + 1, len(packet) - 1, size_bytes):
        length = int.from_bytes(packet[start:start + size_bytes], "little")
        frames.append((at, length))
        at += length
    if at > len(packet) - index:
        raise ValueError("a VP9 superframe index beyond its frames")
    return frames


def resize_vp9_frame(frame: bytes, width: int, height: int) -> bytes:
    """A VP9 keyframe or intra-only frame (or the first such in a superframe) whose header
    declares ``width`` x ``height``. The sides are 16 bits, so every size stays the same and
    the bits are patched in place; the render size is kept (libavcodec ignores it)."""
    if not (0 < width <= 1 << 16 and 0 < height <= 1 << 16):
        raise ValueError("VP9 frame sides take 16 bits")
    for offset, length in _vp9_frames(frame):
        at = _vp9_size_at(frame[offset:offset + length])
        if at is None:
            continue
        head = frame[offset:offset + 16]
        bits = "".join(f"{byte:08b}" for byte in head)
        bits = bits[:at] + f"{width - 1:016b}{height - 1:016b}" + bits[at + 32:]
        patched = bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
        return frame[:offset] + patched + frame[offset + len(head):]
    raise ValueError("no VP9 keyframe or intra-only frame")


def _leb128(data: bytes, at: int) -> tuple[int, int]:
    """A leb128 value (AV1 4.10.5) and the offset after it."""
    value = 0
    for index in range(8):
        if at + index >= len(data):
            raise ValueError("an OBU ends inside its size")
        value |= (data[at + index] & 0x7F) << (7 * index)
        if not data[at + index] & 0x80:
            return value, at + index + 1
    raise ValueError("an OBU size longer than 8 bytes")


def _av1_obus(data: bytes) -> list[tuple[bytes, bytes, int, bytes]]:
    """Each OBU as (its bytes, obu_header with its extension, bytes obu_size took or 0, payload)."""
    obus, at = [], 0
    while at < len(data):
        header = data[at:at + 1 + (data[at] >> 2 & 1)]
        if data[at] & 2:  # obu_has_size_field
            size, start = _leb128(data, at + len(header))
        else:
            size, start = len(data) - at - len(header), at + len(header)
        if start + size > len(data):
            raise ValueError("an OBU beyond the data")
        obus.append((data[at:start + size], header, start - at - len(header), data[start:start + size]))
        at = start + size
    return obus


def _resize_av1_obu(header: bytes, size_bytes: int, payload: bytes, width: int, height: int) -> bytes:
    """A sequence header OBU (AV1 5.5.1) with max_frame_width/height_minus_1 + 1 = ``width``
    x ``height``, its frame_width/height_bits widened only where they have to be, trailing
    bits redone and obu_size rewritten (in as many bytes as before where it fits)."""
    if header[0] >> 3 & 0xF != 1:
        raise ValueError("not an AV1 sequence header OBU")
    bits = _BitCopier(payload)
    bits.copy(3)  # seq_profile
    bits.copy(1)  # still_picture
    if bits.copy(1):  # reduced_still_picture_header
        bits.copy(5)  # seq_level_idx[0]
    else:
        decoder_model = 0
        if bits.copy(1):  # timing_info_present_flag
            bits.copy(64)  # num_units_in_display_tick, time_scale
            if bits.copy(1):  # equal_picture_interval: num_ticks_per_picture_minus_1 uvlc()
                zeros = 0
                while not bits.copy(1):
                    zeros += 1
                bits.copy(zeros if zeros < 32 else 0)
            if bits.copy(1):  # decoder_model_info_present_flag
                decoder_model = bits.copy(5) + 1  # buffer_delay_length_minus_1 + 1
                bits.copy(32 + 5 + 5)
        initial_display_delay = bits.copy(1)
        for _ in range(bits.copy(5) + 1):  # operating_points_cnt_minus_1 + 1
            bits.copy(12)  # operating_point_idc
            if bits.copy(5) > 7:  # seq_level_idx
                bits.copy(1)  # seq_tier
            if decoder_model and bits.copy(1):  # decoder_model_present_for_this_op
                bits.copy(2 * decoder_model + 1)  # operating_parameters_info
            if initial_display_delay and bits.copy(1):
                bits.copy(4)  # initial_display_delay_minus_1
    width_bits, height_bits = bits.read(4) + 1, bits.read(4) + 1
    bits.read(width_bits)
    bits.read(height_bits)
    width_bits, height_bits = max(width_bits, (width - 1).bit_length()), max(height_bits, (height - 1).bit_length())
    if width_bits > 16 or height_bits > 16:
        raise ValueError("AV1 frame sides take at most 16 bits")
    bits.write(width_bits - 1, 4)
    bits.write(height_bits - 1, 4)
    bits.write(width - 1, width_bits)
    bits.write(height - 1, height_bits)
    payload = bits.copy_rest()
    if not size_bytes:
        return header + payload
    size_bytes = max(size_bytes, (len(payload).bit_length() + 6) // 7)
    size = bytes((len(payload) >> 7 * index & 0x7F) | (0x80 if index < size_bytes - 1 else 0)
                 for index in range(size_bytes))
    return header + size + payload


def resize_av1_sequence_header(obu: bytes, width: int, height: int) -> bytes:
    """One sequence header OBU (with or without obu_size) resized."""
    (_, header, size_bytes, payload), *rest = _av1_obus(obu)
    if rest:
        raise ValueError("more than one OBU")
    return _resize_av1_obu(header, size_bytes, payload, width, height)


def resize_av1_temporal_unit(data: bytes, width: int, height: int) -> bytes:
    """OBUs (a temporal unit, an av1C's configOBUs) with every sequence header resized and
    the others kept byte for byte."""
    return b"".join(_resize_av1_obu(header, size_bytes, payload, width, height) if header[0] >> 3 & 0xF == 1
                    else raw for raw, header, size_bytes, payload in _av1_obus(data))


def resize_av1c(record: bytes, width: int, height: int) -> bytes:
    """An av1C (4 fixed bytes, then configOBUs) with its sequence header resized."""
    return record[:4] + resize_av1_temporal_unit(record[4:], width, height)
