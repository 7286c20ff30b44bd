"""The picture sizes the node takes, and the size a stream's headers declare, read before a
decoder sees them.

libavcodec and libvpx allocate pictures of the size a header declares (and H.264 a pool of
references) as soon as they read it, before any frame comes out for ``check_frame_size``:
a 64x64 H.264 stream whose SPS declares 16000x16000 grew a decoder by 1.1 GB (2.6 GB with
frame threads), a VP8 keyframe declaring 16383x16383 by 0.9 GB. So the headers are read
here first, cheaply: the H.264 SPS (in an avcC record or in-band, AVCC or Annex B framing)
and the VP8 keyframe header; the SPS's reference pictures too (``MAX_DPB_MACROBLOCKS``).
A size out of bounds raises ``FrameSizeError`` (the stream ends, saying why); a header
that cannot be read for its size ``UnreadableHeader`` (its sample is dropped as damaged)."""

from __future__ import annotations

from dataclasses import dataclass

from gpu.errors import SwapcastError

# what the live encoders take: libx264 needs even sides of at least 2 (a 1-pixel side
# rounds to 0), NVENC at least 33x17 and at most 4096 a side on most GPUs
MIN_SIDE, MAX_SIDE = 16, 4096
LIMITS = f"each side must be {MIN_SIDE} to {MAX_SIDE} pixels; change the output resolution"
# The reference pictures a decoder is let keep, in luma samples of the coded size: H.264
# levels 5.1-5.2's MaxDpbMbs (Table A-1: 4096x2304 with 5 references or 1080p with 16) and
# HEVC level 5.2's MaxDpbSize at its MaxLumaPs (Table A.8: 4096x2176 with 6). libavcodec
# allocates what an SPS declares up to 16 pictures of any size: 4096x4096 with 16 held
# +0.6 GB per stream.
MAX_DPB_MACROBLOCKS = 184320
REFERENCE_BOUNDS = {
    "H.264": (MAX_DPB_MACROBLOCKS * 256, "H.264's levels 5.1-5.2 hold (4096x2304 with 5, 1920x1080 with 16)"),
    "HEVC": (6 * 8_912_896, "HEVC's level 5.2 holds (4096x2176 with 6, 1920x1080 with 16)"),
}

_SPS_TYPES = frozenset({7, 15})  # a sequence parameter set, and MVC's subset SPS (the same fields first)
# the SPS fields up to its cropping take at most ~1.7 KB (12 scaling lists of 64 17-bit deltas)
_MAX_SPS_BYTES = 4096
_HIGH_PROFILES = frozenset({100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135})
_VP8_START_CODE = b"\x9d\x01\x2a"


class FrameSizeError(SwapcastError):
    """A stream's pictures have (or its headers declare) a size the node does not take."""


class UnreadableHeader(SwapcastError):
    """A header that declares the picture size cannot be read (damaged, truncated): the
    sample holding it must not reach the decoder, which might read some size out of it;
    dropped as damaged data, it ends nothing."""


def check_frame_size(width: int, height: int) -> None:
    """Refuse sizes the encoders cannot open with, before they fail without a reason."""
    if not (MIN_SIDE <= width <= MAX_SIDE and MIN_SIDE <= height <= MAX_SIDE):
        raise FrameSizeError(f"video {width}x{height} cannot be re-encoded: {LIMITS}")


@dataclass(frozen=True)
class DeclaredSize:
    """The pictures a header declares: shown (after cropping) and coded (what is allocated)."""

    width: int
    height: int
    coded_width: int
    coded_height: int
    references: int = 0  # pictures a decoder keeps to predict from (H.264 max_num_ref_frames, HEVC's DPB)
    codec: str = "H.264"  # whose bound in ``REFERENCE_BOUNDS`` the references are held to

    def check(self, header: str) -> None:
        """``FrameSizeError`` naming ``header`` unless the coded sides are at most ``MAX_SIDE``,
        the shown ones at least ``MIN_SIDE``, and the references fit the codec's bound."""
        shown = f"{self.width}x{self.height}"
        if (self.coded_width, self.coded_height) != (self.width, self.height):
            shown += f" (coded {self.coded_width}x{self.coded_height})"
        if not (self.coded_width <= MAX_SIDE and self.coded_height <= MAX_SIDE and min(self.width, self.height) >= MIN_SIDE):
            raise FrameSizeError(f"{header} declares {shown} pictures, which cannot be re-encoded: {LIMITS}")
        samples, levels = REFERENCE_BOUNDS.get(self.codec, (0, ""))
        if samples and self.references * self.coded_width * self.coded_height > samples:
            raise FrameSizeError(f"{header} declares {self.references} reference pictures of {shown}, more than "
                                 f"{levels}; lower the encoder's references")


class RbspBits:
    """A header's bits read MSB first; running past its end raises ``UnreadableHeader``
    naming the header (``label``)."""

    def __init__(self, rbsp: bytes, label: str = "H.264 SPS") -> None:
        self._value = int.from_bytes(rbsp, "big")
        self._left = len(rbsp) * 8
        self.label = label

    @property
    def left(self) -> int:
        return self._left

    def u(self, count: int) -> int:
        if count > self._left:
            raise UnreadableHeader(f"the stream's {self.label} ends before its picture size is read")
        self._left -= count
        return (self._value >> self._left) & ((1 << count) - 1)

    def skip(self, count: int) -> None:
        self.u(count)

    def ue(self) -> int:
        zeros = 0
        while not self.u(1):
            zeros += 1
            if zeros > 31:  # as libavcodec: no field of a parameter set is this long
                raise UnreadableHeader(f"the stream's {self.label} has an Exp-Golomb code over 32 bits")
        return (1 << zeros) - 1 + self.u(zeros)

    def se(self) -> int:
        code = self.ue()
        return (code + 1) // 2 if code % 2 else -(code // 2)


def h264_sps_size(sps: bytes) -> DeclaredSize:
    """The size an SPS NAL unit (its header byte first) declares (H.264 7.3.2.1.1, 7.4.2.1.1);
    ``UnreadableHeader`` when it ends early or holds values no decoder takes."""
    bits = RbspBits(sps[1:_MAX_SPS_BYTES].replace(b"\x00\x00\x03", b"\x00\x00"))  # emulation prevention out
    profile = bits.u(8)
    bits.u(16)  # constraint flags, level_idc
    bits.ue()  # seq_parameter_set_id
    chroma_format, separate_planes = 1, 0
    if profile in _HIGH_PROFILES:
        chroma_format = bits.ue()
        if chroma_format > 3:
            raise UnreadableHeader(f"the stream's H.264 SPS has chroma_format_idc {chroma_format}")
        if chroma_format == 3:
            separate_planes = bits.u(1)
        bits.ue()  # bit_depth_luma_minus8
        bits.ue()  # bit_depth_chroma_minus8
        bits.u(1)  # qpprime_y_zero_transform_bypass_flag
        if bits.u(1):  # seq_scaling_matrix_present_flag
            for index in range(12 if chroma_format == 3 else 8):
                if bits.u(1):
                    _skip_scaling_list(bits, 16 if index < 6 else 64)
    bits.ue()  # log2_max_frame_num_minus4
    order_type = bits.ue()
    if order_type == 0:
        bits.ue()  # log2_max_pic_order_cnt_lsb_minus4
    elif order_type == 1:
        bits.u(1)  # delta_pic_order_always_zero_flag
        bits.se()  # offset_for_non_ref_pic
        bits.se()  # offset_for_top_to_bottom_field
        cycle = bits.ue()
        if cycle > 255:
            raise UnreadableHeader(f"the stream's H.264 SPS has a picture order cycle of {cycle}")
        for _ in range(cycle):
            bits.se()
    elif order_type > 2:
        raise UnreadableHeader(f"the stream's H.264 SPS has pic_order_cnt_type {order_type}")
    references = bits.ue()  # max_num_ref_frames
    bits.u(1)  # gaps_in_frame_num_value_allowed_flag
    width_mbs, height_map_units = bits.ue() + 1, bits.ue() + 1
    frame_mbs_only = bits.u(1)
    if not frame_mbs_only:
        bits.u(1)  # mb_adaptive_frame_field_flag
    bits.u(1)  # direct_8x8_inference_flag
    coded_width, coded_height = width_mbs * 16, height_map_units * 16 * (2 - frame_mbs_only)
    crop = (bits.ue(), bits.ue(), bits.ue(), bits.ue()) if bits.u(1) else (0, 0, 0, 0)
    if chroma_format == 0 or separate_planes:
        unit_x, unit_y = 1, 2 - frame_mbs_only
    else:
        unit_x, unit_y = (1 if chroma_format == 3 else 2), (2 if chroma_format == 1 else 1) * (2 - frame_mbs_only)
    left, right, top, bottom = crop
    return DeclaredSize(coded_width - unit_x * (left + right), coded_height - unit_y * (top + bottom),
                        coded_width, coded_height, references)


def _skip_scaling_list(bits: RbspBits, size: int) -> None:
    last = following = 8
    for _ in range(size):
        if following:
            following = (last + bits.se() + 256) % 256
        last = following or last


def vp8_keyframe_size(frame: bytes) -> DeclaredSize | None:
    """The size a VP8 keyframe declares (RFC 6386 9.1: 14 bits a side, the top 2 bits are
    an upscaling hint the decoder does not apply); None for an interframe, which declares none."""
    if len(frame) < 3 or frame[0] & 1:
        return None
    if len(frame) < 10 or frame[3:6] != _VP8_START_CODE:
        raise UnreadableHeader("the stream's VP8 keyframe header is damaged (no start code 9d 01 2a and size)")
    width, height = (int.from_bytes(frame[at:at + 2], "little") & 0x3FFF for at in (6, 8))
    return DeclaredSize(width, height, width, height)


def check_vp8_frame(frame: bytes) -> None:
    """``FrameSizeError`` for a VP8 keyframe declaring a size the node does not take,
    ``UnreadableHeader`` for one whose header is damaged."""
    size = vp8_keyframe_size(frame)
    if size is not None:
        size.check("the stream's VP8 keyframe")


def check_sps(sps: bytes) -> None:
    """``FrameSizeError`` for an SPS NAL unit declaring a size the node does not take."""
    h264_sps_size(sps).check("the stream's H.264 SPS")


class H264SizeGuard:
    """Checks every SPS of one H.264 stream before libavcodec's decoder reads it: those of
    its extradata, then those in each sample, framed as that decoder frames them (h264dec.c):
    an avcC extradata (first byte 1) means NAL units after 1-4 byte lengths, anything else
    Annex B start codes; with 4-byte lengths a sample that starts with a start code and does
    not parse as lengths switches it to Annex B (and one that parses as lengths back), and
    a length-framed sample that is an avcC record is read as new extradata."""

    def __init__(self, extradata: bytes = b"") -> None:
        self.length_size = 0  # 0: Annex B
        if extradata[:1] == b"\x01":
            _check_avcc_record(extradata)
            self.length_size = (extradata[4] & 0x03) + 1 if len(extradata) > 4 else 4
        else:
            _check_annexb(extradata)
        self._lengths = self.length_size > 0  # libavcodec's is_avc

    def check(self, sample: bytes) -> None:
        """``FrameSizeError`` when an SPS in ``sample`` declares a size the node does not take,
        ``UnreadableHeader`` when one cannot be read."""
        if self._lengths and _is_avcc_record(sample):
            _check_avcc_record(sample)
            self.length_size = (sample[4] & 0x03) + 1
            return
        if self.length_size == 4 and len(sample) > 3:
            first = int.from_bytes(sample[:4], "big")
            if first == 1 and len(sample) > 8 and int.from_bytes(sample[5:9], "big") > len(sample):
                self._lengths = False
            elif 1 < first <= len(sample):
                self._lengths = True
        if self._lengths:
            _check_length_framed(sample, self.length_size)
        else:
            _check_annexb(sample)


def _is_avcc_record(sample: bytes) -> bool:
    """libavcodec's test (h264dec.c) for a sample that carries an avcC instead of NAL units:
    its first bytes say so, and both lists hold only SPS and PPS that fit."""
    if len(sample) < 9 or sample[0] != 1 or sample[2] != 0 or sample[4] & 0xFC != 0xFC:
        return False
    pos = 5
    for count_mask, nal_type in ((0x1F, 7), (0xFF, 8)):
        if pos >= len(sample):
            return False
        count, pos = sample[pos] & count_mask, pos + 1
        if not count:
            return False
        for _ in range(count):
            size = int.from_bytes(sample[pos:pos + 2], "big") + 2
            kind = sample[pos + 2] if pos + 2 < len(sample) else 0  # libavcodec reads its zeroed padding
            if size > len(sample) - pos or kind & 0x9F != nal_type:
                return False
            pos += size
    return True


def _check_length_framed(sample: bytes, length_size: int) -> None:
    """Every SPS among NAL units after ``length_size``-byte lengths; a length that overruns
    makes the decoder refuse the whole sample, so nothing after it is read."""
    pos = 0
    while pos + length_size <= len(sample):
        size, pos = int.from_bytes(sample[pos:pos + length_size], "big"), pos + length_size
        if size > len(sample) - pos:
            return
        _check_nal_unit(sample, pos, pos + size)
        pos += size


def _check_avcc_record(record: bytes) -> None:
    """Every SPS of an avcC, in both of its lists (libavcodec decodes each entry by its own
    NAL type); entries past a length that overruns the record are never read."""
    pos = 5
    for count_mask in (0x1F, 0xFF):
        if pos >= len(record):
            return
        count, pos = record[pos] & count_mask, pos + 1
        for _ in range(count):
            if pos + 2 > len(record):
                return
            size, pos = int.from_bytes(record[pos:pos + 2], "big"), pos + 2
            if size > len(record) - pos:
                return
            _check_nal_unit(record, pos, pos + size)
            pos += size


def _check_nal_unit(data: bytes, start: int, end: int) -> None:
    """``check_sps`` when the NAL unit ``data[start:end]`` is an SPS (only then copied out:
    a keyframe's slices are most of a sample)."""
    if end > start and data[start] & 0x1F in _SPS_TYPES:
        check_sps(data[start:end])


def _check_annexb(data: bytes) -> None:
    """Every SPS of an Annex B byte stream: only the bytes after each start code are looked
    at, and an SPS's own bytes (up to the next start code)."""
    pos = data.find(b"\x00\x00\x01")
    while pos >= 0 and pos + 3 < len(data):
        start = pos + 3
        pos = data.find(b"\x00\x00\x01", start)
        _check_nal_unit(data, start, pos if pos >= 0 else len(data))
