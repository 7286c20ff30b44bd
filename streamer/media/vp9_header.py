"""The picture size a VP9 frame declares, read before libavcodec's VP9 decoder sees it.

Unlike VP8, any VP9 frame may change the size, not only a keyframe: an intra-only frame
and an inter frame that takes no reference's size carry their own 16-bit sides (VP9
bitstream 6.2, read as vp9.c's ``decode_frame_header``), and the decoder reallocates its
frames and tables for them. A packet may be a superframe (Annex B: several frames and an
index at its end), split by the decoder, so each of its frames is read."""

from __future__ import annotations

from streamer.media.picture_limits import DeclaredSize, RbspBits

_SYNC_CODE = 0x498342
_RGB = 7  # color_space CS_RGB
_HEADER_BYTES = 16  # the fields up to an explicit size take at most ~11 bytes


def vp9_frame_sizes(packet: bytes) -> list[DeclaredSize]:
    """The sizes the frames of ``packet`` (one frame or a superframe) declare; a frame that
    shows an earlier one or takes a reference's size declares none. A frame whose marker,
    profile or sync code is wrong declares none either: the decoder refuses it first.
    ``UnreadableHeader`` when a frame ends before its size."""
    sizes = []
    for frame in _frames(packet):
        size = _declared(frame)
        if size is not None:
            sizes.append(size)
    return sizes


def check_vp9_frame(packet: bytes) -> None:
    """``FrameSizeError`` for a VP9 packet with a frame declaring a size the node does not
    take, ``UnreadableHeader`` for one whose header ends before its size."""
    for size in vp9_frame_sizes(packet):
        size.check("the stream's VP9 frame header")


def _frames(packet: bytes) -> list[bytes]:
    """The frames of a superframe (its index well formed, as libavcodec's
    vp9_superframe_split checks it), else the packet as one frame."""
    if not packet:
        return []
    marker = packet[-1]
    if marker & 0xE0 == 0xC0:
        count, width = (marker & 0x07) + 1, ((marker >> 3) & 0x03) + 1
        index_size = 2 + width * count
        if len(packet) >= index_size and packet[-index_size] == marker:
            index = packet[-index_size + 1:-1]
            frames, pos = [], 0
            for number in range(count):
                size = int.from_bytes(index[number * width:(number + 1) * width], "little")
                if pos + size > len(packet) - index_size:
                    return [packet]  # an index the splitter refuses: the packet goes on whole
                frames.append(packet[pos:pos + size])
                pos += size
            return frames
    return [packet]


def _declared(frame: bytes) -> DeclaredSize | None:
    bits = RbspBits(frame[:_HEADER_BYTES], "VP9 frame header")
    if len(frame) < 1 or bits.u(2) != 2:  # frame_marker
        return None
    profile = bits.u(1) | bits.u(1) << 1
    if profile == 3 and bits.u(1):  # reserved_zero
        return None
    if bits.u(1):  # show_existing_frame
        return None
    keyframe = not bits.u(1)  # frame_type
    shown = bits.u(1)
    error_resilient = bits.u(1)
    if keyframe:
        if bits.u(24) != _SYNC_CODE or not _colour_config(bits, profile):
            return None
    else:
        intra_only = bits.u(1) if not shown else 0
        if not error_resilient:
            bits.skip(2)  # reset_frame_context
        if intra_only:
            if bits.u(24) != _SYNC_CODE or (profile > 0 and not _colour_config(bits, profile)):
                return None
            bits.skip(8)  # refresh_frame_flags
        else:
            bits.skip(8 + 3 * 4)  # refresh_frame_flags, ref_frame_idx and sign_bias x 3
            if any(bits.u(1) for _ in range(3)):  # found_ref: a checked reference's size
                return None
    width, height = bits.u(16) + 1, bits.u(16) + 1
    return DeclaredSize(width, height, width, height)


def _colour_config(bits: RbspBits, profile: int) -> bool:
    """color_config (6.2.2); False where libavcodec refuses the frame for it."""
    if profile >= 2:
        bits.skip(1)  # ten_or_twelve_bit
    if bits.u(3) == _RGB:
        return bool(profile & 1) and not bits.u(1)  # RGB only in profiles 1 and 3, reserved_zero
    bits.skip(1)  # color_range
    if profile & 1:
        subsampling_x, subsampling_y = bits.u(1), bits.u(1)
        return not (subsampling_x and subsampling_y) and not bits.u(1)
    return True
