"""FLV tag bodies as RTMP audio/video messages carry them, and H.264 bitstream helpers.

Video: legacy AVC (codec id 7: AVCPacketType + signed 24-bit composition time) and
Enhanced-RTMP `hvc1`/`avc1` (IsExHeader bit + FourCC). Other legacy codecs parse as
"other"; other Enhanced-RTMP FourCCs/packet types are refused with RtmpProtocolError.
Audio: AAC (sound format 10: AACPacketType 0 = AudioSpecificConfig, 1 = raw), anything
else as "other". The helpers convert between the Annex B that libx264 emits and the
length-prefixed AVCC that FLV carries, because the swap pipeline sits between the two."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

from streamer.rtmp.errors import RtmpProtocolError

CODEC_ID_AVC = 7
SOUND_FORMAT_AAC = 10
_EX_HEADER = 0x80
_FOURCCS: dict[bytes, Literal["avc", "hevc"]] = {b"avc1": "avc", b"hvc1": "hevc"}
_FOURCC_OF = {codec: fourcc for fourcc, codec in _FOURCCS.items()}


class FrameType(IntEnum):
    KEY = 1
    INTER = 2
    DISPOSABLE_INTER = 3
    GENERATED_KEY = 4
    COMMAND = 5


class VideoPacketType(IntEnum):
    """AVCPacketType numbering; Enhanced-RTMP packet types are mapped onto it."""

    SEQUENCE_HEADER = 0
    NALU = 1
    END_OF_SEQUENCE = 2


class AacPacketType(IntEnum):
    SEQUENCE_HEADER = 0
    RAW = 1


_EX_PACKET_TYPES = {0: VideoPacketType.SEQUENCE_HEADER, 1: VideoPacketType.NALU, 2: VideoPacketType.END_OF_SEQUENCE, 3: VideoPacketType.NALU}


@dataclass(frozen=True)
class VideoTag:
    """A parsed video body. For "other" codecs and command frames `data` is the rest verbatim."""

    frame_type: int
    codec: Literal["avc", "hevc", "other"]
    packet_type: int
    composition_time: int
    data: bytes
    codec_id: int | None = None  # the legacy codec id; None for Enhanced-RTMP (FourCC) tags

    @property
    def is_keyframe(self) -> bool:
        return self.frame_type == FrameType.KEY

    @property
    def is_sequence_header(self) -> bool:
        return self.codec != "other" and self.packet_type == VideoPacketType.SEQUENCE_HEADER


@dataclass(frozen=True)
class AudioTag:
    """A parsed audio body; `aac_packet_type` is None for non-AAC formats."""

    sound_format: int
    sound_rate: int
    sound_size: int
    sound_type: int
    aac_packet_type: int | None
    data: bytes

    @property
    def is_sequence_header(self) -> bool:
        return self.aac_packet_type == AacPacketType.SEQUENCE_HEADER


def _signed24(raw: bytes) -> int:
    value = int.from_bytes(raw, "big")
    return value - (1 << 24) if value & 0x800000 else value


def parse_video_tag(payload: bytes) -> VideoTag:
    if not payload:
        raise RtmpProtocolError("empty video message")
    first = payload[0]
    if first & _EX_HEADER:
        return _parse_enhanced_video(payload)
    frame_type, codec_id = first >> 4, first & 0x0F
    if codec_id != CODEC_ID_AVC or frame_type == FrameType.COMMAND:
        return VideoTag(frame_type, "other", 0, 0, bytes(payload[1:]), codec_id)
    if len(payload) < 5:
        raise RtmpProtocolError(f"AVC video message of {len(payload)} bytes, need at least 5")
    packet_type = payload[1]
    if packet_type > VideoPacketType.END_OF_SEQUENCE:
        raise RtmpProtocolError(f"unknown AVCPacketType {packet_type}")
    return VideoTag(frame_type, "avc", packet_type, _signed24(payload[2:5]), bytes(payload[5:]), codec_id)


def _parse_enhanced_video(payload: bytes) -> VideoTag:
    if len(payload) < 5:
        raise RtmpProtocolError(f"Enhanced-RTMP video message of {len(payload)} bytes, need at least 5")
    frame_type, ex_type = (payload[0] >> 4) & 0x07, payload[0] & 0x0F
    fourcc = bytes(payload[1:5])
    codec = _FOURCCS.get(fourcc)
    if codec is None:
        raise RtmpProtocolError(f"unsupported Enhanced-RTMP video codec {fourcc!r} (only avc1, hvc1)")
    packet_type = _EX_PACKET_TYPES.get(ex_type)
    if packet_type is None:
        raise RtmpProtocolError(f"unsupported Enhanced-RTMP video packet type {ex_type}")
    if ex_type == 1:  # CodedFrames carries a composition time; CodedFramesX does not
        if len(payload) < 8:
            raise RtmpProtocolError("Enhanced-RTMP CodedFrames without a composition time")
        return VideoTag(frame_type, codec, packet_type, _signed24(payload[5:8]), bytes(payload[8:]))
    return VideoTag(frame_type, codec, packet_type, 0, bytes(payload[5:]))


def build_video_tag(
    data: bytes,
    *,
    keyframe: bool,
    packet_type: VideoPacketType = VideoPacketType.NALU,
    composition_time: int = 0,
    codec: Literal["avc", "hevc"] = "avc",
) -> bytes:
    """A video body: legacy layout for AVC, Enhanced-RTMP (`hvc1`) for HEVC."""
    if not -(1 << 23) <= composition_time < (1 << 23):
        raise ValueError(f"composition time {composition_time} does not fit 24 bits")
    frame_type = FrameType.KEY if keyframe else FrameType.INTER
    cts = (composition_time & 0xFFFFFF).to_bytes(3, "big")
    if codec == "avc":
        return bytes([(frame_type << 4) | CODEC_ID_AVC, packet_type]) + cts + data
    head = bytes([_EX_HEADER | (frame_type << 4) | packet_type]) + _FOURCC_OF[codec]
    return head + (cts if packet_type == VideoPacketType.NALU else b"") + data


def parse_audio_tag(payload: bytes) -> AudioTag:
    if not payload:
        raise RtmpProtocolError("empty audio message")
    first = payload[0]
    sound_format, rate, size, channels = first >> 4, (first >> 2) & 3, (first >> 1) & 1, first & 1
    if sound_format != SOUND_FORMAT_AAC:
        return AudioTag(sound_format, rate, size, channels, None, bytes(payload[1:]))
    if len(payload) < 2:
        raise RtmpProtocolError("AAC audio message without an AACPacketType")
    if payload[1] > AacPacketType.RAW:
        raise RtmpProtocolError(f"unknown AACPacketType {payload[1]}")
    return AudioTag(sound_format, rate, size, channels, payload[1], bytes(payload[2:]))


def build_audio_tag(data: bytes, *, aac_packet_type: AacPacketType = AacPacketType.RAW) -> bytes:
    """An AAC body with the header every AAC-in-FLV uses (0xAF: 44 kHz, 16-bit, stereo flags;
    the real parameters live in the AudioSpecificConfig)."""
    return bytes([0xAF, aac_packet_type]) + data


def is_video_keyframe(payload: bytes) -> bool:
    """Cheap check on the first byte (no copy), for the player's drop policy."""
    return bool(payload) and ((payload[0] >> 4) & 0x07) == FrameType.KEY


def is_sequence_header(kind: str, payload: bytes) -> bool:
    """True for an AVC/HEVC decoder configuration or an AAC AudioSpecificConfig."""
    if len(payload) < 2:
        return False
    if kind == "video":
        if payload[0] & _EX_HEADER:
            return payload[0] & 0x0F == 0
        return payload[0] & 0x0F == CODEC_ID_AVC and payload[1] == VideoPacketType.SEQUENCE_HEADER
    if kind == "audio":
        return payload[0] >> 4 == SOUND_FORMAT_AAC and payload[1] == AacPacketType.SEQUENCE_HEADER
    return False


def split_annexb(data: bytes) -> list[bytes]:
    """NAL units of an Annex B byte stream (3- or 4-byte start codes; empty units dropped)."""
    units: list[bytes] = []
    length = len(data)
    start = -1
    i = 0
    while i + 2 < length:
        if data[i] == 0 and data[i + 1] == 0 and data[i + 2] == 1:
            if start >= 0:
                units.append(bytes(data[start:i]).rstrip(b"\x00"))
            i += 3
            start = i
        else:
            i += 1
    if start >= 0:
        units.append(bytes(data[start:]))
    elif data:
        units.append(bytes(data))  # no start code at all: one bare NAL unit
    return [unit for unit in units if unit]


def annexb_to_avcc(data: bytes) -> bytes:
    """Annex B (start codes) → AVCC (4-byte big-endian lengths), as FLV NALU packets carry."""
    return b"".join(struct.pack(">I", len(unit)) + unit for unit in split_annexb(data))


def avcc_to_annexb(data: bytes, length_size: int = 4) -> bytes:
    """AVCC → Annex B with 4-byte start codes; a length that overruns raises RtmpProtocolError."""
    if length_size not in (1, 2, 3, 4):
        raise ValueError(f"NAL length size {length_size} not in 1..4")
    out = bytearray()
    pos = 0
    while pos < len(data):
        if pos + length_size > len(data):
            raise RtmpProtocolError("AVCC data ends inside a NAL length field")
        size = int.from_bytes(data[pos : pos + length_size], "big")
        pos += length_size
        if pos + size > len(data):
            raise RtmpProtocolError(f"AVCC NAL unit of {size} bytes overruns the data")
        out += b"\x00\x00\x00\x01" + data[pos : pos + size]
        pos += size
    return bytes(out)


def avc_decoder_config(sps: bytes, pps: bytes) -> bytes:
    """An AVCDecoderConfigurationRecord (avcC) for one SPS and one PPS, 4-byte NAL lengths.

    Profile/compat/level come from the SPS. The High-profile chroma/bit-depth extension is
    left out: it is optional for decoders (libavcodec reads the SPS itself)."""
    if len(sps) < 4:
        raise ValueError("SPS too short to carry profile and level")
    return (
        bytes([1, sps[1], sps[2], sps[3], 0xFF, 0xE1])
        + struct.pack(">H", len(sps))
        + sps
        + bytes([1])
        + struct.pack(">H", len(pps))
        + pps
    )


@dataclass(frozen=True)
class AvcConfig:
    """A parsed avcC: parameter sets and the NAL length size the NALU packets use."""

    profile: int
    level: int
    length_size: int
    sps: list[bytes]
    pps: list[bytes]


def parse_avc_decoder_config(record: bytes) -> AvcConfig:
    """Parse an avcC (the body of an AVC sequence header), e.g. to prepend SPS/PPS to a keyframe."""
    if len(record) < 7 or record[0] != 1:
        raise RtmpProtocolError("not an AVCDecoderConfigurationRecord")
    pos = 5
    sets: list[list[bytes]] = []
    for count_mask in (0x1F, 0xFF):
        if pos >= len(record):
            raise RtmpProtocolError("avcC truncated before a parameter set count")
        count = record[pos] & count_mask
        pos += 1
        units = []
        for _ in range(count):
            if pos + 2 > len(record):
                raise RtmpProtocolError("avcC truncated inside a parameter set length")
            size = struct.unpack_from(">H", record, pos)[0]
            pos += 2
            if pos + size > len(record):
                raise RtmpProtocolError("avcC parameter set overruns the record")
            units.append(bytes(record[pos : pos + size]))
            pos += size
        sets.append(units)
    return AvcConfig(record[1], record[3], (record[4] & 0x03) + 1, sets[0], sets[1])
