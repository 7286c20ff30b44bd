"""Streams whose headers declare pictures far larger than they carry: a real H.264 SPS
rewritten to another size (the rest of the stream left as it was, so its slices still
decode against it) and a VP8 keyframe whose 14-bit sides are rewritten. A decoder given
one allocates the declared size (and references of it) before any frame comes out.

The SPS grammar is written out here on its own rather than borrowed from
``streamer.media.picture_limits``: the tests that parse with one and craft with the other
then check each against the other."""

from __future__ import annotations

from streamer.rtmp.flv import avc_decoder_config, parse_avc_decoder_config

_HIGH_PROFILES = frozenset({100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135})


class _BitCopier:
    """Reads an RBSP bit by bit and writes what it reads (or a replacement) to a new one."""

    def __init__(self, rbsp: bytes) -> None:
        self.bits = "".join(f"{byte:08b}" for byte in rbsp)
        self.pos = 0
        self.out: list[str] = []

    def read(self, count: int) -> int:
        field = self.bits[self.pos:self.pos + count]
        if len(field) < count:
            raise ValueError("the SPS ends inside a field")
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
