"""The face library over HTTP: samples, uploads and every refusal, each with its reason."""

from __future__ import annotations

import aiohttp
import cv2
import numpy as np
from webrtc_harness import jpeg, node, png, run

from streamer.faces import FaceLibrary, ImageTooLargeError, NotAnImageError, decode_image


def test_samples_upload_and_thumbnails(engine, grace_image, tmp_path):
    async def scenario():
        async with node(engine, tmp_path) as client:
            listing = await (await client.get("/api/v1/faces")).json()
            thumb = await client.get(listing[0]["thumbnail_url"])
            thumb_type, thumb_bytes = thumb.content_type, await thumb.read()

            raw = await client.post("/api/v1/faces?name=grace", data=jpeg(grace_image),
                                    headers={"Content-Type": "image/jpeg"})
            raw_reply = raw.status, await raw.json()
            form = aiohttp.FormData()
            form.add_field("image", png(grace_image), filename="hopper.png", content_type="image/png")
            multipart = await client.post("/api/v1/faces", data=form)
            multipart_reply = multipart.status, await multipart.json()
            after = await (await client.get("/api/v1/faces")).json()
            missing = await client.get("/api/v1/faces/nobody/thumbnail.jpg")
            return locals()

    r = run(scenario())
    ids = [face["id"] for face in r["listing"]]
    assert ids[:2] == ["astronaut", "grace_hopper"]
    assert all(set(face) == {"id", "name", "owner", "photos", "thumbnail_url"} for face in r["listing"])
    assert r["thumb_type"] == "image/jpeg"
    thumbnail = cv2.imdecode(np.frombuffer(r["thumb_bytes"], np.uint8), cv2.IMREAD_COLOR)
    assert thumbnail is not None and max(thumbnail.shape[:2]) <= 160
    status, face = r["raw_reply"]
    assert status == 201 and face["name"] == "grace" and face["thumbnail_url"].split("?")[0].endswith("/thumbnail.jpg")
    status, face2 = r["multipart_reply"]
    assert status == 201 and face2["name"] == "hopper"
    assert [f["id"] for f in r["after"]] == [*ids, face["id"], face2["id"]]  # samples first, then uploads
    assert r["missing"].status == 404


def test_upload_refusals(engine, two_faces, tmp_path):
    blank = np.full((480, 640, 3), 128, np.uint8)
    wide = np.zeros((8, 4100, 3), np.uint8)

    async def scenario():
        async with node(engine, tmp_path) as client:
            got = {}
            for name, data in {
                "no face": png(blank),
                "several faces": png(two_faces),
                "not an image": b"this is not a picture at all",
                "empty": b"",
                "too many bytes": b"\xff\xd8" + bytes(11 * 1024 * 1024),
                "too many pixels": png(wide),
            }.items():
                response = await client.post("/api/v1/faces", data=data, headers={"Content-Type": "application/octet-stream"})
                got[name] = response.status, (await response.json())["error"]
            form = aiohttp.FormData()
            form.add_field("picture", b"x", filename="x.png")
            response = await client.post("/api/v1/faces", data=form)
            got["wrong field"] = response.status, (await response.json())["error"]
            listing = await (await client.get("/api/v1/faces")).json()
            return got, listing

    got, listing = run(scenario())
    assert got["no face"][0] == 422 and "no face" in got["no face"][1]
    assert got["several faces"][0] == 422 and "2 faces" in got["several faces"][1]
    assert got["not an image"][0] == 415 and "not a readable image" in got["not an image"][1]
    assert got["empty"][0] == 415
    assert got["too many bytes"][0] == 413 and "MB" in got["too many bytes"][1]
    assert got["too many pixels"][0] == 413 and "4100x8" in got["too many pixels"][1]
    assert got["wrong field"][0] == 400 and '"image"' in got["wrong field"][1]
    assert [face["id"] for face in listing] == ["astronaut", "grace_hopper"]  # nothing was added


def test_library_registers_off_the_event_loop(engine, astronaut_image):
    async def scenario():
        import threading

        library = FaceLibrary(engine)
        seen = []
        original = engine.register_source

        def spy(*args, **kwargs):
            seen.append(threading.current_thread().name)
            return original(*args, **kwargs)

        engine.register_source = spy
        try:
            entry = await library.add(png(astronaut_image), name="eileen")
        finally:
            del engine.register_source
            library.close()
        return entry, seen, threading.current_thread().name

    entry, seen, loop_thread = run(scenario())
    assert entry.name == "eileen" and entry.source is not None and entry.thumbnail_jpeg[:2] == b"\xff\xd8"
    assert seen and all(name.startswith("face-library") for name in seen)
    assert loop_thread not in seen


def test_decode_limits_without_decoding_pixels():
    for data, error in [(b"GIF89a garbage", NotAnImageError), (png(np.zeros((4097, 2, 3), np.uint8)), ImageTooLargeError)]:
        try:
            decode_image(data)
        except error:
            continue
        raise AssertionError(f"{error.__name__} expected")
