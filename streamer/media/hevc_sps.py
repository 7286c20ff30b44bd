"""The picture size and reference pictures an HEVC SPS declares, read before libavcodec's
HEVC decoder sees it (phones record HEVC: a job upload or ``swapcast swap`` input may be one).

The decoder sizes its per-picture tables and its frame pool from each SPS it reads (in the
hvcC extradata or in-band in any sample); a 64x64 stream whose SPS says 16000x16000 makes it
allocate for that size. ``HevcSizeGuard`` checks every SPS of a stream, framed as the
decoder frames it (hevc/ps.c, h2645_parse.c): an hvcC extradata (its first bytes not 00 00
0x with x < 2) means NAL units after 1-4 byte lengths in every sample, anything else Annex B."""

from __future__ import annotations

from streamer.media.picture_limits import DeclaredSize, RbspBits, UnreadableHeader

HEVC = "HEVC"
_SPS_TYPE = 33
_MAX_SPS_BYTES = 4096  # the fields up to the DPB sizes: ~100 bytes with every sub-layer's profile
_PROFILE_BITS = 88  # profile_space .. the constraint flags (H.265 7.3.3), without level_idc
_SUB_WIDTH_HEIGHT = {0: (1, 1), 1: (2, 2), 2: (2, 1), 3: (1, 1)}  # chroma_format_idc -> SubWidthC, SubHeightC


def hevc_sps_size(nal: bytes) -> DeclaredSize | None:
    """The size an SPS NAL unit (its 2-byte header first) declares (H.265 7.3.2.2), with its
    largest ``sps_max_dec_pic_buffering``; None for a multi-layer extension SPS, whose size
    the VPS gives (only MV-HEVC's second view uses one, and libavcodec decodes the base
    view unless asked). ``UnreadableHeader`` when it ends early or holds values no decoder takes."""
    layer = ((nal[0] & 1) << 5) | (nal[1] >> 3) if len(nal) > 1 else 0
    bits = RbspBits(nal[2:_MAX_SPS_BYTES].replace(b"\x00\x00\x03", b"\x00\x00"), "HEVC SPS")
    bits.u(4)  # sps_video_parameter_set_id
    sub_layers = bits.u(3)  # sps_max_sub_layers_minus1 (sps_ext_or_max_sub_layers_minus1 on a layer > 0)
    if layer > 0 and sub_layers == 7:
        return None
    if sub_layers > 6:
        raise UnreadableHeader(f"the stream's HEVC SPS has {sub_layers + 1} sub-layers (at most 7)")
    bits.u(1)  # sps_temporal_id_nesting_flag
    _skip_profile_tier_level(bits, sub_layers)
    bits.ue()  # sps_seq_parameter_set_id
    chroma_format = bits.ue()
    if chroma_format > 3:
        raise UnreadableHeader(f"the stream's HEVC SPS has chroma_format_idc {chroma_format}")
    if chroma_format == 3 and bits.u(1):  # separate_colour_plane_flag: three monochrome planes
        chroma_format = 0
    coded_width, coded_height = bits.ue(), bits.ue()
    left = right = top = bottom = 0
    if bits.u(1):  # conformance_window_flag
        left, right, top, bottom = bits.ue(), bits.ue(), bits.ue(), bits.ue()
    bits.ue()  # bit_depth_luma_minus8
    bits.ue()  # bit_depth_chroma_minus8
    bits.ue()  # log2_max_pic_order_cnt_lsb_minus4
    every_sub_layer = bits.u(1)  # sps_sub_layer_ordering_info_present_flag
    pictures = 0
    for _ in range(sub_layers + 1 if every_sub_layer else 1):
        pictures = max(pictures, bits.ue() + 1)  # sps_max_dec_pic_buffering_minus1
        bits.ue()  # sps_max_num_reorder_pics
        bits.ue()  # sps_max_latency_increase_plus1
    unit_x, unit_y = _SUB_WIDTH_HEIGHT[chroma_format]
    return DeclaredSize(coded_width - unit_x * (left + right), coded_height - unit_y * (top + bottom),
                        coded_width, coded_height, pictures, HEVC)


def _skip_profile_tier_level(bits: RbspBits, sub_layers: int) -> None:
    """profile_tier_level(1, sub_layers) (H.265 7.3.3): nothing in it bears on the size."""
    bits.skip(_PROFILE_BITS + 8)  # general profile and general_level_idc
    present = [(bits.u(1), bits.u(1)) for _ in range(sub_layers)]  # sub_layer_profile/level_present_flag
    if sub_layers:
        bits.skip(2 * (8 - sub_layers))  # reserved_zero_2bits
    for profile, level in present:
        bits.skip(_PROFILE_BITS * profile + 8 * level)


def check_hevc_sps(nal: bytes) -> None:
    """``FrameSizeError`` for an SPS NAL unit declaring a size the node does not take."""
    size = hevc_sps_size(nal)
    if size is not None:
        size.check("the stream's HEVC SPS")


class HevcSizeGuard:
    """Checks every SPS of one HEVC stream before libavcodec's decoder reads it: those of its
    extradata, then those in each sample."""

    def __init__(self, extradata: bytes = b"") -> None:
        self.length_size = 0  # 0: Annex B
        if len(extradata) > 3 and (extradata[0] or extradata[1] or extradata[2] > 1):
            self.length_size = _check_hvcc(extradata)
        else:
            _check_annexb(extradata)

    def check(self, sample: bytes) -> None:
        """``FrameSizeError`` when an SPS in ``sample`` declares a size the node does not take,
        ``UnreadableHeader`` when one cannot be read."""
        if self.length_size:
            _check_length_framed(sample, self.length_size)
        else:
            _check_annexb(sample)


def _check_hvcc(record: bytes) -> int:
    """Every SPS of an HEVCDecoderConfigurationRecord (ISO/IEC 14496-15 8.3.3), each entry
    judged by its own NAL type as libavcodec does; its NAL length size. An entry whose length
    overruns the record makes the decoder refuse the extradata: nothing after it is read."""
    fixed = record[:23].ljust(23, b"\x00")  # libavcodec reads zeros past a short record's end
    length_size = (fixed[21] & 0x03) + 1
    pos = 23
    for _ in range(fixed[22]):  # numOfArrays
        if pos + 3 > len(record):
            break
        count, pos = int.from_bytes(record[pos + 1:pos + 3], "big"), pos + 3
        for _ in range(count):
            size = int.from_bytes(record[pos:pos + 2], "big")
            if pos + 2 + size > len(record):
                return length_size
            _check_nal_unit(record, pos + 2, pos + 2 + size)
            pos += 2 + size
    return length_size


def _check_length_framed(sample: bytes, length_size: int) -> None:
    pos = 0
    while pos + length_size <= len(sample):
        size, pos = int.from_bytes(sample[pos:pos + length_size], "big"), pos + length_size
        if size > len(sample) - pos:
            return  # the decoder refuses the sample from here: nothing more is read
        _check_nal_unit(sample, pos, pos + size)
        pos += size


def _check_annexb(data: bytes) -> None:
    pos = data.find(b"\x00\x00\x01")
    while pos >= 0 and pos + 3 < len(data):
        start = pos + 3
        pos = data.find(b"\x00\x00\x01", start)
        _check_nal_unit(data, start, pos if pos >= 0 else len(data))


def _check_nal_unit(data: bytes, start: int, end: int) -> None:
    """``check_hevc_sps`` when ``data[start:end]`` is an SPS (only then copied out)."""
    if end - start > 1 and (data[start] >> 1) & 0x3F == _SPS_TYPE:
        check_hevc_sps(data[start:end])
