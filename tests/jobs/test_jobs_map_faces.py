"""Map faces in offline jobs: the submission's ``faces_map`` (people named by reference face
ids) is checked, stored with the job, and every chunk finds the same people again by
identity: a person in the first chunk and in the last wears the same face."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from jobs_harness import FPS, Workers, finish

from signaling.jobs.service import JobRequestError, parse_faces_map
from streamer.media.frames import read_frames
from swapcast.benchmarks.people_clips import steady_clip

pytestmark = pytest.mark.slow

SECONDS = 4  # two 2 s chunks


@pytest.fixture(scope="module")
def two_people(tmp_path_factory) -> tuple[Path, object]:
    """4 s of the people set's two people talking, a keyframe a second (two chunks)."""
    clip = steady_clip(quick=True)
    path = tmp_path_factory.mktemp("map_clips") / "two.mp4"
    gop = str(FPS)
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=FPS, options={"preset": "veryfast", "crf": "20", "g": gop,
                                                                   "keyint_min": gop, "sc_threshold": "0"})
        video.width, video.height, video.pix_fmt = 640, 480, "yuv420p"
        video.codec_context.time_base = Fraction(1, FPS)
        for number in range(SECONDS * FPS):
            frame = av.VideoFrame.from_ndarray(clip.frames[number * 2], format="rgb24")  # 30 fps drawn, 15 fps kept
            frame.pts, frame.time_base = number, Fraction(1, FPS)
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
    return path, clip


@pytest.fixture(scope="module")
def pool(redis_server, storage, tmp_path_factory):
    workers = Workers(redis_server.url, storage, tmp_path_factory.mktemp("worker_logs"))
    yield workers
    workers.close()


@pytest.mark.parametrize(("text", "words"), [
    ('{"person-2": "astronaut"}', "same person in every chunk"),
    ("[1]", "JSON object"),
    ("{not json", "JSON object"),
    ('{"astronaut": 3}', "JSON object"),
    ('{"a/b": "astronaut"}', "expected a reference face id"),
    (json.dumps({f"face{n}": "keep" for n in range(17)}), "at most 16"),
])
def test_bad_maps_are_refused_with_a_reason(text, words):
    with pytest.raises(JobRequestError) as refused:
        parse_faces_map(text)
    assert words in str(refused.value) and refused.value.status == 400
    assert parse_faces_map(None) == {} and parse_faces_map('{"astronaut": "keep"}') == {"astronaut": "keep"}


def test_the_api_checks_and_keeps_the_map(client, clips) -> None:
    good = {"astronaut": "grace_hopper", "grace_hopper": "keep"}
    status, job = client.submit(clips.short, extra={"faces_map": json.dumps(good), "unmapped": "keep"})
    assert status == 201, job
    assert job["faces_map"] == good and job["unmapped"] == "keep" and job["face_id"] is None
    assert client.get(job["id"])[1]["faces_map"] == good
    for extra, words in (
        ({"faces_map": json.dumps({"astronaut": "nobody-here"}), "unmapped": "keep"}, "unknown face_id 'nobody-here'"),
        ({"faces_map": json.dumps(good)}, "unmapped 'keep'"),  # no face for the people it does not name
        ({"faces_map": json.dumps(good), "unmapped": "sometimes"}, "unmapped must be"),
    ):
        status, body = client.submit(clips.short, extra=extra)
        assert status == 400 and words in body["error"], body


def test_every_chunk_maps_the_same_people(pool, client, two_people, tmp_path) -> None:
    video, clip = two_people
    pool.revive()
    status, job = client.submit(video, extra={"faces_map": json.dumps({"astronaut": "grace_hopper", "grace_hopper": "keep"}),
                                              "unmapped": "keep"})
    assert status == 201, job
    done = finish(client, pool, job["id"])
    assert done["state"] == "completed", (done, pool.logs())
    assert done["chunks"]["total"] == 2
    status, data = client.request("GET", done["output"])
    output = tmp_path / "out.mp4"
    output.write_bytes(data)
    before, after = read_frames(video), read_frames(output)
    assert len(after) == len(before) == SECONDS * FPS
    for index in (3, FPS * SECONDS // 2 + 3, FPS * SECONDS - 3):  # in the first chunk and in the second
        changes = {}
        for spot in clip.truth[index * 2]:
            x0, y0, x1, y1 = (max(0, int(v)) for v in spot.box)
            changes[spot.person] = float(np.abs(after[index][y0:y1, x0:x1].astype(np.float32)
                                                - before[index][y0:y1, x0:x1]).mean())
        print(f"frame {index}: mean change per person {changes}")
        assert changes["astronaut"] > 3 * changes["grace_hopper"], changes  # mapped vs kept, in both chunks
