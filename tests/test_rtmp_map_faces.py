"""An RTMP stream with a stream key's faces map: the key names people by photo (as
``swapcast keys add --map ref.jpg=face.jpg`` stores them); a publisher sends two people;
the one named wears the face the key maps them to, the other is kept, and the stream
lists both."""

from __future__ import annotations

import asyncio

from media_fixtures import publish
from test_rtmp_ingest import Node

from gpu.analysis.identity import identity_distance
from streamer.live.h264 import H264Encoder
from streamer.media.images import write_image
from streamer.rtmp.flv import VideoPacketType, build_video_tag
from streamer.rtmp.handler import MediaMessage
from swapcast.benchmarks.people_clips import photo_of, steady_clip

FRAMES = 60


def two_people_messages() -> tuple[list[MediaMessage], object]:
    clip = steady_clip(quick=True)
    encoder = H264Encoder(640, 480, bitrate_kbps=2500, keyframe_interval_s=1.0, fps_hint=25)
    packets = [p for i, frame in enumerate(clip.frames[:FRAMES]) for p in encoder.encode(frame, 40 * i)]
    header = build_video_tag(encoder.sequence_header, keyframe=True, packet_type=VideoPacketType.SEQUENCE_HEADER)
    return [MediaMessage("video", 0, header)] + [MediaMessage("video", p.dts, build_video_tag(p.data, keyframe=p.keyframe))
                                                 for p in packets], clip


def test_a_stream_keys_map_puts_each_person_in_their_own_face(engine, tmp_path, identity_of):
    photos = {}
    for person in ("astronaut", "grace_hopper"):
        photos[person] = tmp_path / f"{person}.png"
        write_image(photos[person], photo_of(person))
    messages, clip = two_people_messages()

    async def scenario():
        async with Node(engine, tmp_path / "data") as node:
            key, record = node.keys.add("podcast", photos["grace_hopper"], swap={"unmapped": "keep"},
                                        map_photos={str(photos["astronaut"]): str(photos["grace_hopper"]),
                                                    str(photos["grace_hopper"]): "keep"})
            worn = []
            client = await publish(node.url(key), messages[:1], close=False)
            stream = node.ingest.streams[record.key_id]
            for message in messages[1:]:
                await client.send(message)
                await asyncio.sleep(0.04)
                worn.append([(face.box.copy(), label) for face, _, label in stream.worker.swapper.last_wearing])
            await asyncio.sleep(1.0)
            info = stream.info()
            latest = stream.worker.latest_rgb.copy()
            await client.close()
            return record, worn, info, latest

    record, worn, info, latest = asyncio.run(scenario())
    labels = {label for frame in worn for _, label in frame}
    astronaut_box = next(a.box for a in clip.truth[0] if a.person == "astronaut")
    print("labels worn:", labels, "; people:", [(p["id"], p["wears"]) for p in info["people"]])
    wears = f"{record.key_id}-wears0-grace_hopper.png"  # the stored copy of the photo the astronaut wears
    assert labels == {wears}  # the astronaut's only: Grace Hopper is kept
    assert all(abs(box[0] - astronaut_box[0]) < 60 for frame in worn for box, _ in frame)
    assert sum(1 for frame in worn if frame) >= FRAMES // 3
    assert sorted(p["wears"] for p in info["people"]) == sorted(["keep", wears])
    spot = next(a for a in clip.truth[FRAMES - 1] if a.person == "astronaut")
    found = engine.identity(latest, spot.face())
    assert identity_distance(found, identity_of(photo_of("grace_hopper"))) < identity_distance(found, identity_of(photo_of("astronaut")))
