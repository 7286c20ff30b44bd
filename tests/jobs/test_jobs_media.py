"""The media side of jobs without the queue: keyframe cuts without re-encoding, rendering a
chunk through the engine, joining with the audio and the verification, plus the pure pieces
(upload signatures, webhook signatures)."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import av
import pytest
from jobs_harness import FPS, ffprobe
from media_fixtures import corrupt_copy

from gpu.options import SwapOptions
from signaling.jobs.uploads import is_image, video_container
from signaling.jobs.webhook import sign, verify
from streamer.jobs.assemble import Expected, assemble
from streamer.jobs.render import Abandoned, Encoding, render_chunk
from streamer.jobs.split import split_video
from streamer.media.errors import VideoError
from swapcast.benchmarks.jobs import write_face_clip


def packets(path: Path) -> list[tuple[int, bool, str]]:
    """(pts, keyframe, data hash) of every video packet, in decode order."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return [(p.pts, p.is_keyframe, hashlib.sha1(bytes(p)).hexdigest()) for p in container.demux(stream) if p.size]


@pytest.fixture(scope="module")
def bframes_clip(tmp_path_factory) -> Path:
    """7 s at 25 fps with B-frames and a keyframe every second."""
    path = tmp_path_factory.mktemp("bframes") / "clip.mp4"
    write_face_clip(path, 7, size=(320, 240), fps=25, keyframe_s=1.0, preset="veryfast")
    return path


def test_split_cuts_at_keyframes_without_reencoding(bframes_clip, tmp_path) -> None:
    result = split_video(bframes_clip, tmp_path / "split", 3.0, label="clip.mp4")
    # cuts at 3 s; the next keyframe (6 s) would leave a 1 s tail, which stays with the last chunk
    assert [(p.frames, p.start_s, p.duration_s) for p in result.pieces] == [(75, 0.0, 3.0), (100, 3.0, 4.0)]
    assert (result.frames, result.duration_s, result.frame_s, result.has_audio) == (175, 7.0, 0.04, True)
    chunks = [packets(p.path) for p in result.pieces]
    assert all(chunk[0][1] for chunk in chunks)  # every chunk starts with a keyframe
    assert [p for chunk in chunks for p in chunk] == packets(bframes_clip)  # same bytes, same timestamps


@pytest.mark.parametrize(("encoder", "gop", "chunks"), [
    (["-c:v", "libx264", "-x264-params", "open-gop=1"], "open", 1),
    (["-c:v", "libx265", "-x265-params", "log-level=error"], "open", 1),  # x265's default: CRA keyframes
    (["-c:v", "libx265", "-x265-params", "log-level=error:open-gop=0"], "closed", 6),
])
def test_split_cuts_only_where_a_gop_closes_so_every_chunk_decodes_whole(tmp_path, encoder, gop, chunks) -> None:
    """An open GOP's keyframe is followed by pictures that predict from the GOP before it:
    a chunk starting there lost them (6 of its 9 frames decoded) and failed its job."""
    clip = tmp_path / "clip.mp4"
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=64x64:rate=10",
                    "-t", "6", *encoder, "-g", "10", str(clip)], check=True, timeout=120)
    keyframes = sum(keyframe for _, keyframe, _ in packets(clip))
    assert keyframes == 6  # one a second, open or closed
    pieces = split_video(clip, tmp_path / "split", 1.0, label="clip.mp4").pieces
    assert len(pieces) == chunks
    for piece in pieces:
        with av.open(str(piece.path)) as chunk:
            assert sum(1 for _ in chunk.decode(video=0)) == piece.frames


def test_render_and_assemble_keep_frames_duration_and_audio(engine, astronaut_image, bframes_clip, tmp_path) -> None:
    result = split_video(bframes_clip, tmp_path / "split", 3.0, label="clip.mp4")
    source = engine.register_source(astronaut_image)
    rendered = []
    for piece in result.pieces:
        out = tmp_path / "rendered" / piece.path.name
        report = render_chunk(engine, source, SwapOptions(), piece.path, out, expected_frames=piece.frames,
                              encoding=Encoding(), stopped=lambda: False, label="chunk", session_id="test")
        assert report.frames_out == piece.frames
        rendered.append(out)
    expected = Expected(result.frames, result.duration_s, result.frame_s, result.has_audio)
    done = assemble(bframes_clip, rendered, tmp_path, expected)
    assert (done.path.name, done.frames, done.audio_codec) == ("output.mp4", 175, "aac")
    probe, original = ffprobe(done.path), ffprobe(bframes_clip)
    assert probe.frames == original.frames == 175 and probe.audio == "aac"
    assert abs(probe.duration_s - original.duration_s) <= 1 / 25

    with pytest.raises(VideoError, match=r"failed verification: 75 frames instead of 175; lasts 3\.000 s"):
        assemble(bframes_clip, rendered[:1], tmp_path / "rendered", expected)
    assert not list((tmp_path / "rendered").glob("*output*"))  # a result that fails is never left behind


def test_render_stops_when_told_and_names_damage_by_time(engine, astronaut_image, tmp_path) -> None:
    clip = tmp_path / "clip.mp4"
    write_face_clip(clip, 2, size=(320, 240), fps=FPS, keyframe_s=1.0)
    source = engine.register_source(astronaut_image)
    kwargs = {"expected_frames": 30, "encoding": Encoding(), "label": "clip.mp4 between 4.0 s and 6.0 s",
              "session_id": "test"}
    with pytest.raises(Abandoned):
        render_chunk(engine, source, SwapOptions(), clip, tmp_path / "out.mov", stopped=lambda: True, **kwargs)
    damaged = tmp_path / "damaged.mp4"
    corrupt_copy(clip, damaged, fraction=0.5)
    with pytest.raises(VideoError) as caught:
        render_chunk(engine, source, SwapOptions(), damaged, tmp_path / "out.mov", stopped=lambda: False, **kwargs)
    assert str(caught.value).startswith("clip.mp4 between 4.0 s and 6.0 s: damaged data, decoding stopped after")
    assert str(damaged) not in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.mp4", "damaged.mp4"]


def test_split_refuses_what_is_not_a_video(tmp_path) -> None:
    text = tmp_path / "notes.mp4"
    text.write_text("not a video")
    with pytest.raises(VideoError, match=r"^upload\.mp4: not a readable video file"):
        split_video(text, tmp_path / "split", 3.0, label="upload.mp4")


def test_container_and_image_signatures(bframes_clip, tmp_path) -> None:
    assert video_container(bframes_clip.read_bytes()[:192]) == "mp4"
    assert video_container(b"\x1a\x45\xdf\xa3" + bytes(60)) == "matroska"
    assert video_container(b"RIFF\0\0\0\0AVI LIST") == "avi"
    assert video_container(b"hello world, this is text") is None
    assert is_image(b"\x89PNG\r\n\x1a\n....") and is_image(b"\xff\xd8\xff\xe0") and not is_image(b"GIF89a")


def test_webhook_signature_is_hmac_sha256_of_the_body() -> None:
    # RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?"
    expected = "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert sign(b"what do ya want for nothing?", "Jefe") == expected
    assert verify(b"what do ya want for nothing?", "Jefe", expected)
    assert not verify(b"what do ya want for nothing!", "Jefe", expected) and not verify(b"x", "Jefe", None)
