"""The upload layer: face images (raw bodies and multipart) and job uploads (a video and a
source photo): real pictures of a face, truncated, bit-damaged, in odd formats, and bombs
whose headers declare huge sizes; multipart bodies with broken boundaries, names and parts."""

from __future__ import annotations

import random
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from swapcast.benchmarks.fuzz.fixtures import Fixtures
from swapcast.benchmarks.fuzz.mutate import NON_UTF8, mutate_bytes
from swapcast.benchmarks.fuzz.node import FuzzNode, build_request, send_raw
from swapcast.benchmarks.fuzz.outcome import Outcome, http_outcome
from swapcast.benchmarks.fuzz.video_bombs import (
    DESCRIBED_AGAIN,
    WAYS,
    crafted_clip,
    described_again,
    encode_clip,
    odd_first_frame,
)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(width: int, height: int, idat: bytes = b"") -> bytes:
    """A well-formed PNG header declaring ``width`` x ``height`` (valid CRCs), little data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat or zlib.compress(b"\0" * 4096))
            + _png_chunk(b"IEND", b""))


def zlib_bomb_png(side: int) -> bytes:
    """A real, valid PNG of ``side`` x ``side`` black pixels: tiny on the wire, big decoded."""
    rows = (b"\0" + b"\0" * side * 3) * side
    return png_bomb(side, side, zlib.compress(rows, 9))


def jpeg_with_size(jpeg: bytes, width: int, height: int) -> bytes:
    """``jpeg`` with its frame header (SOF0/SOF2) claiming another size."""
    data = bytearray(jpeg)
    for marker in (b"\xff\xc0", b"\xff\xc2"):
        at = data.find(marker)
        if at >= 0:
            data[at + 5:at + 9] = struct.pack(">HH", height, width)
    return bytes(data)


class Pictures:
    """The face photo in several formats, and the hostile variants made from them."""

    def __init__(self, jpeg: bytes) -> None:
        image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
        self.jpeg = jpeg
        self.others = [cv2.imencode(ext, image)[1].tobytes() for ext in (".png", ".webp", ".bmp", ".tiff")]
        small = cv2.resize(image, (48, 48))
        self.others.append(cv2.imencode(".png", small)[1].tobytes())

    def pick(self, rng: random.Random) -> tuple[str, bytes]:
        roll = rng.random()
        base = self.jpeg if rng.random() < 0.5 else rng.choice(self.others)
        if roll < 0.15:
            return "valid", base
        if roll < 0.35:
            return "truncated", base[:rng.randrange(max(len(base), 1))]
        if roll < 0.6:
            return "damaged", mutate_bytes(rng, base, rng.randint(1, 12))
        if roll < 0.8:
            side = rng.choice((0, 1, 65535, 65536, 2**31 - 1, 2**32 - 1, 100000))
            return "bomb", rng.choice((
                png_bomb(side, rng.choice((1, side, 50000))), jpeg_with_size(self.jpeg, side & 0xFFFF, 65535),
                b"GIF89a" + struct.pack("<HH", 65535, 65535) + b"\x00\x00\x00" + b"\x2c" + b"\x00" * 20,
                b"BM" + b"\x00" * 16 + struct.pack("<ii", 2**30, 2**30) + b"\x01\x00\x18\x00" + b"\x00" * 24,
            ))
        if roll < 0.85:
            return "zlib-bomb", zlib_bomb_png(rng.choice((2000, 4000, 8000)))
        return "odd", rng.choice((
            b"", b"not an image", b"<svg xmlns='http://www.w3.org/2000/svg'/>", b"\x00" * 100, b"%PDF-1.4",
            b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"RIFF\xff\xff\xff\xffWEBPVP8 ", b"II*\x00" + b"\xff" * 64,
            b"\x00\x00\x00\x18ftypheic" + b"\x00" * 40, rng.randbytes(rng.randint(1, 5000)),
        ))


def multipart(rng: random.Random, parts: list[tuple[str, bytes, str | None]]) -> tuple[bytes, bytes]:
    """(Content-Type, body) of a multipart/form-data upload of ``parts`` (name, data,
    filename), sometimes broken: boundaries, dispositions, names, endings."""
    boundary = rng.choice((b"fuzzboundary", b"x" * 70, b"a b", b"\xff\xfe", b"--", b""))
    body = bytearray()
    for name, data, filename in parts:
        disposition = b'form-data; name="' + name.encode() + b'"'
        if filename is not None:
            disposition += b'; filename="' + filename.encode("utf-8", "surrogateescape") + b'"'
        if rng.random() < 0.1:
            disposition = rng.choice((b"form-data", b"attachment; name=image", b'form-data; name="image', b"\xff",
                                      b'form-data; name="image"; filename="' + rng.choice(NON_UTF8) + b'.jpg"'))
        body += b"--" + boundary + b"\r\nContent-Disposition: " + disposition + b"\r\n"
        if rng.random() < 0.5:
            body += b"Content-Type: " + rng.choice((b"image/jpeg", b"video/mp4", b"text/plain", b"\xff")) + b"\r\n"
        body += b"\r\n" + data + b"\r\n"
    if rng.random() < 0.9:
        body += b"--" + boundary + b"--\r\n"
    content_type = b"multipart/form-data; boundary=" + boundary
    if rng.random() < 0.1:
        content_type = rng.choice((b"multipart/form-data", b"multipart/mixed; boundary=other", b"multipart/\xff"))
    raw = bytes(body)
    return content_type, mutate_bytes(rng, raw) if rng.random() < 0.1 else raw


@dataclass(frozen=True)
class VerifyClip:
    """A video for the provenance verifier: ``bomb`` when its headers declare 16000x16000
    (``video_bombs``), which the node must refuse (413) before decoding it."""

    label: str
    data: bytes
    suffix: str
    bomb: bool


def verify_clips(folder: Path) -> list[VerifyClip]:
    """Every way of ``video_bombs`` and the plain file of each codec (ffmpeg needed), 20 s
    MP4s whose second sample description declares the size from 14 s on, and a 64x64 frame
    followed by 3,000 frames of another size at 90 kHz (``odd_first_frame``)."""
    clips = []
    for codec in dict(WAYS):
        plain = encode_clip(codec, folder, seconds=2.0)
        clips.append(VerifyClip(f"{codec}/plain", plain.read_bytes(), plain.suffix, False))
        clips += [VerifyClip(f"{codec}/{where}", crafted_clip(plain, codec, where).read_bytes(), plain.suffix, True)
                  for way_codec, where in WAYS if way_codec == codec]
    longer = folder / "described-again"
    longer.mkdir(exist_ok=True)
    for codec in DESCRIBED_AGAIN:
        crafted = described_again(encode_clip(codec, longer, seconds=20.0), codec, keyframe=15)
        clips.append(VerifyClip(f"{codec}/described-again", crafted.read_bytes(), crafted.suffix, True))
    odd = odd_first_frame(folder, 3000)  # decoded within the verifier's budget, not to its end
    clips.append(VerifyClip("h264/odd-first-frame", odd.read_bytes(), odd.suffix, False))
    return clips


class UploadLayer:
    name = "upload"

    def __init__(self, node: FuzzNode, fixtures: Fixtures, video: bytes | None, clips: list[VerifyClip] | None = None) -> None:
        """``clips``: videos for ``POST /api/v1/provenance/verify`` (the one upload anyone may
        send, decoded in the node's own process)."""
        self.node, self.fixtures, self.video = node, fixtures, video
        self.pictures = Pictures(fixtures.face_jpeg)
        self.clips = clips or []

    async def once(self, rng: random.Random) -> Outcome:
        if self.clips and rng.random() < 0.25:
            return await self._verify(rng)
        auth = [(b"Authorization", b"Bearer " + rng.choice((self.fixtures.alice, self.fixtures.bob)).encode())]
        kind, picture = self.pictures.pick(rng)
        if self.video is not None and rng.random() < 0.25:
            label = f"job/{kind}"
            video = self.video if rng.random() < 0.3 else mutate_bytes(rng, self.video, rng.randint(1, 20))
            parts = [("video", video, "clip.mp4"), ("source", picture, "me.jpg"),
                     ("priority", rng.choice((b"low", b"urgent", b"\xff")), None)]
            if rng.random() < 0.3:
                parts.append(("face_id", self.fixtures.face_id.encode(), None))
            rng.shuffle(parts)
            content_type, body = multipart(rng, parts[:rng.randint(1, len(parts))])
            raw = build_request(b"POST", b"/api/v1/jobs", auth + [(b"Content-Type", content_type)], body)
        elif rng.random() < 0.5:
            label = f"face-raw/{kind}"
            content_type = rng.choice((b"image/jpeg", b"image/png", b"image/webp", b"application/octet-stream", b""))
            name = rng.choice((b"", b"?name=fuzz", b"?name=" + b"n" * 500, b"?name=%ff%fe", b"?name=%00"))
            raw = build_request(b"POST", b"/api/v1/faces" + name, auth + [(b"Content-Type", content_type)], picture)
        else:
            label = f"face-multipart/{kind}"
            parts = [(rng.choice(("image", "image", "img", "")), picture, rng.choice(("me.jpg", "", "..\\x.png", None)))]
            if rng.random() < 0.2:
                parts = [("other", b"x", None)] * rng.choice((1, 50, 1000)) + parts
            content_type, body = multipart(rng, parts)
            raw = build_request(b"POST", b"/api/v1/faces", auth + [(b"Content-Type", content_type)], body)
        answer = await send_raw(self.node.http_port, raw, timeout=30.0)
        return http_outcome(self.name, label, raw, answer)

    async def _verify(self, rng: random.Random) -> Outcome:
        clip = rng.choice(self.clips)
        damaged = rng.random() < 0.3
        data = mutate_bytes(rng, clip.data, rng.randint(1, 20)) if damaged else clip.data
        return await self.verify(clip, data, rng.choice((self.fixtures.alice, self.fixtures.bob)))

    async def verify(self, clip: VerifyClip, data: bytes, bearer: str) -> Outcome:
        """``data`` (the clip, or it damaged) to the verifier; the clip as it is, when a bomb,
        must not be read (a 413 naming its size; a rate limit's 429 reads nothing either)."""
        kind = b"video/webm" if clip.suffix == ".webm" else b"video/mp4"
        path = b"/api/v1/provenance/verify?name=clip" + clip.suffix.encode()
        headers = [(b"Authorization", b"Bearer " + bearer.encode()), (b"Content-Type", kind)]
        raw = build_request(b"POST", path, headers, data)
        answer = await send_raw(self.node.http_port, raw, timeout=30.0)
        intact = data == clip.data
        outcome = http_outcome(self.name, f"verify/{clip.label}" + ("" if intact else "/damaged"), raw, answer)
        if clip.bomb and intact and outcome.problem is None and answer.status in (200, 422):
            return Outcome(self.name, outcome.label, outcome.status,
                           f"a video declaring 16000x16000 ({clip.label}) got {answer.status}, not 413: it was read",
                           raw)
        return outcome
