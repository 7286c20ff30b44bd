"""Video files in the codecs phones and browsers record — H.264 and HEVC (mp4, avcC/hvcC),
VP8 and VP9 (webm), AV1 (mp4, av1C) — whose headers declare 16000x16000 pictures while the
container says 64x64: a 64x64 HEVC stream whose SPS says 16000x16000 grew its decoder by
4 GB (8192x8192: 1 GB; measured). Each is refused before anything is decoded, by a job's
split and by ``swapcast swap``'s transcode, saying why; the same files uncrafted go through.
Codecs whose headers are not read are bounded by the decoder's ``max_pixels``."""

from __future__ import annotations

import subprocess

import av
import pytest
from verifier_client import post_to_verifier

from streamer.jobs.split import split_video
from streamer.media import stream_guard
from streamer.media.errors import VideoError
from streamer.media.picture_limits import FrameSizeError
from streamer.media.stream_guard import check_video_file
from streamer.media.transcode import transcode_video
from swapcast.benchmarks.fuzz.video_bombs import DESCRIBED_AGAIN, HEADERS, WAYS, crafted_clip, described_again, encode_clip

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("codec", "where"), WAYS)
def test_a_file_declaring_16000x16000_is_refused_by_a_job_and_by_swap_before_decoding(tmp_path, codec, where):
    plain = encode_clip(codec, tmp_path)
    check_video_file(plain)
    pieces = split_video(plain, tmp_path / "plain-chunks", 1.0, label="plain").pieces  # VP9, AV1 chunks: mp4; VP8: mkv
    assert len(pieces) >= 2
    with av.open(str(pieces[1].path)) as chunk:
        assert sum(1 for _ in chunk.decode(video=0)) == pieces[1].frames
    crafted = crafted_clip(plain, codec, where)
    # extradata: libavformat's parser reads the size out of it as the stream's own, refused as such
    declared = rf"the (video stream|stream's {HEADERS[codec]}) declares 16000x16000 pictures, which cannot be re-encoded"
    with pytest.raises(FrameSizeError, match=declared):
        check_video_file(crafted)
    with pytest.raises(VideoError, match=rf"^upload: {declared}"):
        split_video(crafted, tmp_path / "chunks", 1.0, label="upload")
    seen = []
    with pytest.raises(VideoError, match=declared):
        transcode_video(crafted, tmp_path / "out.mp4", lambda rgb, seconds: seen.append(rgb.shape) or rgb)
    assert set(seen) <= {(64, 64, 3)}  # nothing of the crafted size was decoded


@pytest.mark.parametrize("codec", DESCRIBED_AGAIN)
def test_a_second_sample_description_declaring_16000x16000_is_refused_where_the_demuxer_switches_to_it(tmp_path, codec):
    """An MP4's later samples described by a second entry: the demuxer passes its decoder
    configuration as new extradata on the first of them (14 s in, long after the open's
    probe), and the decoder takes it (8192x8192 frames decoded out of a 64x64 file)."""
    crafted = described_again(encode_clip(codec, tmp_path, seconds=20), codec, keyframe=15)
    with av.open(str(crafted)) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.width, stream.codec_context.height) == (64, 64)
        assert [n for n, p in enumerate(container.demux(stream)) if p.size and p.has_sidedata("new_extradata")] == [140]
    declared = rf"the stream's {HEADERS[codec]} declares 16000x16000 pictures"
    with pytest.raises(FrameSizeError, match=declared):
        check_video_file(crafted)
    with pytest.raises(VideoError, match=declared):
        split_video(crafted, tmp_path / "chunks", 2.0, label="upload")
    seen = []
    with pytest.raises(VideoError, match=declared):
        transcode_video(crafted, tmp_path / "out.mp4", lambda rgb, seconds: seen.append(rgb.shape) or rgb)
    assert not seen  # refused before its first frame: the whole file's headers are read first


@pytest.mark.parametrize(("codec", "where"), [("hevc", "in-band"), ("vp9", "in-band"), ("av1", "extradata")])
def test_the_verifier_answers_413_to_such_an_upload_and_reads_the_plain_one(tmp_path, codec, where):
    """``POST /api/v1/provenance/verify`` decodes uploads in the node's own process: an HEVC
    upload declaring 16000x16000 in-band reached the decoder before (its container and
    H.264/VP8 headers were all that was read)."""
    plain = encode_clip(codec, tmp_path)
    kind = "video/webm" if plain.suffix == ".webm" else "video/mp4"
    status, answer = post_to_verifier(crafted_clip(plain, codec, where).read_bytes(), f"clip{plain.suffix}", kind)
    assert status == 413 and "declares 16000x16000 pictures" in answer["error"], (status, answer)
    status, answer = post_to_verifier(plain.read_bytes(), f"clip{plain.suffix}", kind)
    assert status == 200 and answer["kind"] == "video", (status, answer)


def test_a_decoder_refuses_pictures_over_its_bound_whatever_the_codec(tmp_path, monkeypatch):
    """The backstop for codecs whose headers are not read (MPEG-4 here): with the bound
    lowered under the file's own size, its transcode fails instead of decoding."""
    mpeg4 = tmp_path / "clip.avi"
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=64x64:rate=10",
                    "-t", "1", "-c:v", "mpeg4", str(mpeg4)], check=True, timeout=60)
    transcode_video(mpeg4, tmp_path / "out.mp4", lambda rgb, seconds: rgb)
    monkeypatch.setattr(stream_guard, "MAX_DECODED_PIXELS", 32 * 32)
    with pytest.raises(VideoError, match="clip.avi"):
        transcode_video(mpeg4, tmp_path / "again.mp4", lambda rgb, seconds: rgb)
