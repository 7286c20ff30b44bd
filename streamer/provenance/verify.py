"""Read provenance back: the watermark from the frames of an image, a video file, a
recording or a live stream URL (rtmp://, http(s)://), and the C2PA manifest of a file.

Exit codes for scripts (``Verdict.exit_code``): 0 the watermark is there (and any manifest
validates), 1 no watermark found, 3 a C2PA manifest is present but fails validation
(tampered or untrusted-and-broken); bad input is the CLI's usual 2."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
from PIL import Image

from gpu.errors import SwapcastError
from gpu.watermark.detect import MAX_FRAMES, MIN_SIDE, Detection, Detector
from streamer.media.decode_budget import DecodeBudget, DecodeBudgetExceeded
from streamer.media.images import HEADER_CHECKED_FORMATS, is_image_path
from streamer.media.picture_limits import FrameSizeError, UnreadableHeader
from streamer.media.stream_guard import bound_decoder, check_video_file
from streamer.provenance.credentials import NO_MANIFEST, ManifestReport, mime_type, read_manifest
from streamer.provenance.marker import ProvenanceSettings
from streamer.provenance.payload import Payload

DEFAULT_SECONDS = 3.0  # of video read: the detector accumulates over frames
# A picture's header may declare a gigapixel in a megabyte of PNG (2 GB to decode): what is
# verified is at most 8192x8192 (8K video and ordinary photos), checked before decoding.
MAX_PIXELS = 8192 * 8192
STREAM_TIMEOUT_S = 10.0
# What one verification decodes at most (``decode_budget``): the detector keeps MAX_FRAMES
# frames of the first picture size; frames of other sizes are read and dropped, counted too.
MAX_DECODED_FRAMES = 4 * MAX_FRAMES
MAX_DECODED_PIXELS = 600 * 1920 * 1080
MAX_DECODE_S = 20.0
EXIT_MARKED, EXIT_UNMARKED, EXIT_MANIFEST_INVALID = 0, 1, 3


class VerifyError(SwapcastError):
    """The input cannot be read as an image, a video or a stream."""


@dataclass(frozen=True)
class Verdict:
    source: str
    kind: str  # image | video | stream
    detection: Detection
    manifest: ManifestReport

    @property
    def payload(self) -> Payload | None:
        return Payload.from_bits(self.detection.message) if self.detection.found else None

    @property
    def exit_code(self) -> int:
        if self.manifest.present and not self.manifest.valid:
            return EXIT_MANIFEST_INVALID
        return EXIT_MARKED if self.detection.found else EXIT_UNMARKED

    def to_dict(self) -> dict[str, Any]:
        found = self.detection
        return {
            "source": self.source,
            "kind": self.kind,
            "watermark": {
                "found": found.found,
                "payload": self.payload.to_dict() if self.payload else None,
                # the sync peak in deviations (7 is the threshold) and the share of raw coded
                # bits that agree with the decoded payload (0.5 = noise, 1 = clean)
                "confidence": {"sync_z": round(found.sync_z, 1), "chip_agreement": round(found.chip_agreement, 3)},
                "frames": found.frames,
            },
            "c2pa": self.manifest.to_dict(),
            "exit_code": self.exit_code,
        }

    def summary(self) -> str:
        found = self.detection
        if found.found:
            payload = self.payload.to_dict()
            mark = (f"watermark FOUND: issuer {payload['issuer']}, stream {payload['stream_hash']}, hour "
                    f"{payload['hour_utc']} (sync z {found.sync_z:.1f}, agreement {found.chip_agreement:.0%}, "
                    f"{found.frames} frame(s))")
        else:
            mark = f"no watermark found (sync z {found.sync_z:.1f}, {found.frames} frame(s))"
        if not self.manifest.present:
            c2pa_line = "C2PA: no manifest"
        elif self.manifest.valid:
            c2pa_line = f"C2PA: manifest {self.manifest.state} (by {self.manifest.generator})"
        else:
            c2pa_line = f"C2PA: manifest INVALID ({', '.join(self.manifest.failures) or self.manifest.state})"
        return f"{self.source}: {mark}\n{c2pa_line}"


def verify(source: str | Path, settings: ProvenanceSettings, *, seconds: float = DEFAULT_SECONDS) -> Verdict:
    """Verify a file path or a stream URL."""
    text = str(source)
    if "://" in text:
        return Verdict(text, "stream", _detect_video(text, settings, seconds, stream=True), NO_MANIFEST)
    path = Path(text)
    if not path.is_file():
        raise VerifyError(f"{path}: no such file")
    mime = mime_type(path)
    manifest = read_manifest(path, mime, settings.c2pa_trust_anchors) if mime else NO_MANIFEST
    if is_image_path(path):
        _check_declared_size(path)
        luma = cv2.imdecode(np.fromfile(str(path), dtype=np.uint8), cv2.IMREAD_GRAYSCALE)
        if luma is None:
            raise VerifyError(f"{path}: not a readable image")
        _check_size(str(path), luma.shape)
        detector = Detector(settings.watermark_key)
        detector.add(luma)
        return Verdict(text, "image", detector.result(), manifest)
    _check_declared_video_size(path)
    return Verdict(text, "video", _detect_video(text, settings, seconds, stream=False), manifest)


def decode_budget() -> DecodeBudget:
    """What one verification may decode: every frame counted, the ones the detector skips
    (another size than the first) too, whatever the timestamps say."""
    return DecodeBudget(max_frames=MAX_DECODED_FRAMES, max_pixels=MAX_DECODED_PIXELS, max_seconds=MAX_DECODE_S)


def _detect_video(source: str, settings: ProvenanceSettings, seconds: float, *, stream: bool) -> Detection:
    detector = Detector(settings.watermark_key)
    budget = decode_budget()
    options = {"rw_timeout": str(int(STREAM_TIMEOUT_S * 1e6))} if stream else {}
    try:
        with av.open(source, options=options, timeout=STREAM_TIMEOUT_S if stream else None) as container:
            if not container.streams.video:
                raise VerifyError(f"{source}: no video stream")
            bound_decoder(container.streams.video[0].codec_context)
            first: tuple[float, int, int] | None = None  # time, height, width of the first frame
            for frame in container.decode(video=0):
                budget.charge(frame.width, frame.height)
                at = float(frame.time) if frame.time is not None else 0.0
                if first is None:
                    first = (at, frame.height, frame.width)
                    _check_size(source, (frame.height, frame.width))
                if at - first[0] >= seconds:
                    break
                if (frame.height, frame.width) != first[1:]:
                    continue  # the detector reads one picture size: not converted, but counted above
                if not detector.add(frame.to_ndarray(format="gray")):
                    break
    except DecodeBudgetExceeded:
        pass  # the verdict is over what was read within the budget
    except (av.error.FFmpegError, OSError, ValueError) as exc:
        if detector.frames == 0:
            raise VerifyError(f"{source}: cannot be read as video: {exc}") from None
    if detector.frames == 0:
        raise VerifyError(f"{source}: no video frames")
    return detector.result()


class TooManyPixelsError(VerifyError):
    """A picture or video frame over ``MAX_PIXELS``."""

    status = 413


def _check_declared_size(path: Path) -> None:
    """The size an image's header declares, read without decoding it, in a format Pillow and
    OpenCV tell by the same first bytes; any other file is refused before OpenCV decodes it
    (a Radiance HDR named .png, which Pillow does not know, was decoded at 32000x4800 from
    9.7 MB: +2.2 GB before the size was checked)."""
    try:
        with Image.open(path, formats=HEADER_CHECKED_FORMATS) as image:
            width, height = image.size
    except Image.DecompressionBombError:
        raise TooManyPixelsError(f"{path}: the picture declares more than {MAX_PIXELS:,} pixels") from None
    except (OSError, ValueError, SyntaxError):
        raise VerifyError(f"{path}: not a readable image (send JPEG, PNG, WebP or BMP)") from None
    _check_size(str(path), (height, width))


def _check_declared_video_size(path: Path) -> None:
    """The picture size a video file's container and headers declare, before it is decoded
    (``check_video_file``): a 64x64 upload declaring 16000x16000 cost over 1 GB in the open's
    probe alone. Swapcast's own videos are at most ``MAX_SIDE`` a side (its encoders' limit);
    a header that cannot be read for its size is refused as damaged (the decoder might read
    some size out of it); a file PyAV cannot open is left to ``_detect_video``, which says so."""
    try:
        check_video_file(path)
    except FrameSizeError as exc:
        raise TooManyPixelsError(f"{path}: {exc}") from None
    except UnreadableHeader as exc:
        raise VerifyError(f"{path}: damaged video ({exc})") from None
    except (av.error.FFmpegError, OSError):
        return


def _check_size(source: str, shape: tuple[int, ...]) -> None:
    if shape[0] * shape[1] > MAX_PIXELS:
        raise TooManyPixelsError(f"{source}: {shape[1]}x{shape[0]} is more than the {MAX_PIXELS:,} pixels "
                                 "the verifier reads")
    if min(shape[:2]) < MIN_SIDE:
        raise VerifyError(f"{source}: {shape[1]}x{shape[0]} is too small to carry the watermark "
                          f"(at least {MIN_SIDE}x{MIN_SIDE})")
