"""Faces over the API: names (from the file, typed, renamed), deletion, ownership, the
signed thumbnail links an ``<img>`` loads without the token, and faces made of several
photos of one person (in one upload or added later, bounded, someone else refused)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import aiohttp
import cv2
import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

sys.path.insert(0, str(Path(__file__).resolve().parent / "webrtc"))
from webrtc_harness import TEST_SECRET, bearer, jpeg, node, run  # noqa: E402

from signaling.auth.signed_urls import ExpiredUrlError, SignedUrlError, UrlSigner  # noqa: E402
from signaling.registry import FaceRecord  # noqa: E402
from streamer.faces import BadFaceNameError, face_name, file_face_name  # noqa: E402
from streamer.webrtc.routes import FACES_KEY  # noqa: E402
from swapcast.app import build_app  # noqa: E402
from swapcast.config import load_config  # noqa: E402

ALICE, BOB = bearer("alice"), bearer("bob")


async def _upload(client, image, headers, query: str = "") -> dict:
    form = aiohttp.FormData()
    form.add_field("image", jpeg(image), filename="Grace_Hopper.jpeg", content_type="image/jpeg")
    answer = await client.post(f"/api/v1/faces{query}", data=form, headers=headers)
    assert answer.status == 201, await answer.text()
    return await answer.json()


async def _anonymous_get(client, url: str) -> tuple[int, bytes]:
    """What an <img> tag does: no Authorization header."""
    async with aiohttp.ClientSession() as session, session.get(client.make_url(url)) as answer:
        return answer.status, await answer.read()


def test_an_upload_is_named_after_its_file_or_the_typed_name(engine, grace_image, tmp_path):
    async def scenario():
        async with node(engine, tmp_path) as client:
            from_file = await _upload(client, grace_image, ALICE)
            typed = await _upload(client, grace_image, ALICE, "?name=Admiral")
            bad = await client.post("/api/v1/faces?name=a%07b", data=jpeg(grace_image),
                                    headers={**ALICE, "Content-Type": "image/jpeg"})
            return from_file, typed, bad.status, await bad.json()

    from_file, typed, bad_status, bad_body = run(scenario())
    assert from_file["name"] == "Grace_Hopper"
    assert typed["name"] == "Admiral"
    assert bad_status == 400 and "control characters" in bad_body["error"]


def test_rename_and_delete_own_faces_only(engine, grace_image, tmp_path):
    async def scenario():
        async with node(engine, tmp_path) as client:
            face = await _upload(client, grace_image, ALICE)
            url = f"/api/v1/faces/{face['id']}"
            got = {
                "bob renames": await client.patch(url, json={"name": "mine now"}, headers=BOB),
                "bob deletes": await client.delete(url, headers=BOB),
                "bob thumbnail": await client.get(f"{url}/thumbnail.jpg", headers=BOB),
                "missing renamed": await client.patch("/api/v1/faces/u-000000000000", json={"name": "x"},
                                                      headers=BOB),
                "sample renamed": await client.patch("/api/v1/faces/astronaut", json={"name": "x"}, headers=ALICE),
                "sample deleted": await client.delete("/api/v1/faces/astronaut", headers=ALICE),
                "renamed": await client.patch(url, json={"name": "  Amazing Grace  "}, headers=ALICE),
            }
            bodies = {key: await answer.json() for key, answer in got.items()}
            bob_list = await (await client.get("/api/v1/faces", headers=BOB)).json()
            alice_list = await (await client.get("/api/v1/faces", headers=ALICE)).json()
            deleted = await client.delete(url, headers=ALICE)
            after = {
                "list": await (await client.get("/api/v1/faces", headers=ALICE)).json(),
                "thumbnail": (await client.get(f"{url}/thumbnail.jpg", headers=ALICE)).status,
                "again": (await client.delete(url, headers=ALICE)).status,
            }
            return face, {k: v.status for k, v in got.items()}, bodies, bob_list, alice_list, deleted.status, after

    face, statuses, bodies, bob_list, alice_list, deleted, after = run(scenario())
    missing = f"no face with id {face['id']!r}"
    # another user's face is answered exactly like a missing one
    for key in ("bob renames", "bob deletes", "bob thumbnail"):
        assert (statuses[key], bodies[key]["error"]) == (404, missing), key
    assert statuses["missing renamed"] == 404
    assert statuses["sample renamed"] == statuses["sample deleted"] == 403
    assert "sample" in bodies["sample renamed"]["error"]
    assert statuses["renamed"] == 200 and bodies["renamed"]["name"] == "Amazing Grace"
    assert face["id"] not in {f["id"] for f in bob_list}
    assert {f["id"]: f["name"] for f in alice_list}[face["id"]] == "Amazing Grace"
    assert deleted == 204
    assert face["id"] not in {f["id"] for f in after["list"]}
    assert after["thumbnail"] == after["again"] == 404


@pytest.mark.parametrize(("body", "reason"), [
    ({"name": ""}, "must not be empty"),
    ({"name": "   "}, "must not be empty"),
    ({"name": "x" * 81}, "the limit is 80"),
    ({"name": "line\nbreak"}, "control characters"),
    ({"name": "bidi\u202eevil"}, "control characters"),
    ({"name": 7}, "must be a string"),
    ({}, "name is required"),
    ({"name": "ok", "owner": "bob"}, "unknown field(s): owner"),
    (["name"], "expected a JSON object"),
])
def test_a_bad_rename_is_a_400_with_its_reason(engine, grace_image, tmp_path, body, reason):
    async def scenario():
        async with node(engine, tmp_path) as client:
            face = await _upload(client, grace_image, ALICE)
            answer = await client.patch(f"/api/v1/faces/{face['id']}", json=body, headers=ALICE)
            return answer.status, await answer.json()

    status, answer = run(scenario())
    assert status == 400 and reason in answer["error"]


def test_a_bad_json_rename_is_a_400(engine, grace_image, tmp_path):
    async def scenario():
        async with node(engine, tmp_path) as client:
            face = await _upload(client, grace_image, ALICE)
            answer = await client.patch(f"/api/v1/faces/{face['id']}", data=b"{name:", headers=ALICE)
            return answer.status, await answer.json()

    assert run(scenario()) == (400, {"error": "the body must be JSON"})


def test_signed_thumbnail_links_load_without_the_token(engine, grace_image, tmp_path):
    async def scenario():
        async with node(engine, tmp_path) as client:
            face = await _upload(client, grace_image, ALICE)
            listing = await (await client.get("/api/v1/faces", headers=ALICE)).json()
            urls = {f["id"]: f["thumbnail_url"] for f in listing}
            own, sample = urls[face["id"]], urls["astronaut"]
            path, query = own.split("?")
            other_path = "/api/v1/faces/grace_hopper/thumbnail.jpg"
            got = {
                "own": await _anonymous_get(client, own),
                "sample": await _anonymous_get(client, sample),
                "plain path": await _anonymous_get(client, path),
                "tampered": await _anonymous_get(client, own[:-4] + ("0000" if not own.endswith("0000") else "1111")),
                "moved to another face": await _anonymous_get(client, f"{other_path}?{query}"),
                "no expiry": await _anonymous_get(client, f"{path}?sig={query.split('sig=')[1]}"),
            }
            expired_signer = UrlSigner(TEST_SECRET, ttl_s=60, clock=lambda: 1_000_000.0)  # issued long ago
            got["expired"] = await _anonymous_get(client, expired_signer.sign(path, "alice"))
            fresh_signer = UrlSigner(TEST_SECRET)
            got["signed for bob"] = await _anonymous_get(client, fresh_signer.sign(path, "bob"))
            got["other secret"] = await _anonymous_get(client, UrlSigner("not the secret " * 3).sign(path, "alice"))
            await client.delete(f"/api/v1/faces/{face['id']}", headers=ALICE)
            got["after delete"] = await _anonymous_get(client, own)
            return got

    got = run(scenario())
    for key in ("own", "sample"):
        status, body = got[key]
        assert status == 200 and body[:2] == b"\xff\xd8", key  # a JPEG
    assert got["plain path"][0] == 401  # no token, no signature
    for key in ("tampered", "moved to another face", "signed for bob", "other secret", "after delete", "no expiry"):
        assert got[key][0] == 404, key
    assert got["expired"][0] == 403 and b"expired" in got["expired"][1]


def test_a_signed_link_stops_working_when_it_expires():
    now = [1_700_000_000.0]
    signer = UrlSigner("a server secret of enough length", ttl_s=300, clock=lambda: now[0])
    url = signer.sign("/api/v1/faces/u-1/thumbnail.jpg", "alice")
    path, query = url.split("?")
    params = dict(part.split("=") for part in query.split("&"))
    expires = int(params["expires"])
    assert now[0] + 300 <= expires < now[0] + 300 + 60  # rounded up to the minute: stable URLs, cacheable
    signer.check(path, "alice", params["expires"], params["sig"], "missing")
    with pytest.raises(SignedUrlError, match="missing"):
        signer.check(path, "bob", params["expires"], params["sig"], "missing")
    with pytest.raises(SignedUrlError, match="missing"):
        signer.check("/api/v1/faces/u-2/thumbnail.jpg", "alice", params["expires"], params["sig"], "missing")
    now[0] = float(expires)
    with pytest.raises(ExpiredUrlError):
        signer.check(path, "alice", params["expires"], params["sig"], "missing")
    with pytest.raises(SignedUrlError, match="malformed"):
        signer.check_expiry("soon")


def test_face_names():
    assert face_name("  Ada  ") == "Ada"
    assert face_name("Zoë 😀") == "Zoë 😀"
    for bad in ("", "a\tb", "a\x7fb", "x" * 81, "a\u2028b"):
        with pytest.raises(BadFaceNameError):
            face_name(bad)
    assert file_face_name("C:\\photos\\me.at.home.jpg") == "me.at.home"
    assert file_face_name(".hidden") == ".hidden"
    assert file_face_name("x" * 200 + ".png") == "x" * 80
    assert file_face_name("\x01.png") is None and file_face_name(None) is None


def test_only_signed_thumbnail_reads_pass_without_a_token():
    """The node and the gateway share ``is_public``: a signed link passes both to the
    handler that checks it; nothing else about faces does."""
    from aiohttp.test_utils import make_mocked_request

    from swapcast.app import is_public

    signed = "/api/v1/faces/u-1/thumbnail.jpg?expires=1&sig=ab"
    assert is_public(make_mocked_request("GET", signed))
    assert not is_public(make_mocked_request("GET", "/api/v1/faces/u-1/thumbnail.jpg"))
    assert not is_public(make_mocked_request("DELETE", signed))
    assert not is_public(make_mocked_request("GET", "/api/v1/faces?sig=ab"))
    assert not is_public(make_mocked_request("PATCH", "/api/v1/faces/u-1?sig=ab"))


# -- a face made of several photos of one person ---------------------------------------------

def _mirrored(image):
    """Another photo of the same person: the mirror image (dlib distance ~0.2)."""
    return np.ascontiguousarray(image[:, ::-1])


def _photos_form(*photos: tuple[str, bytes], field: str = "image") -> aiohttp.FormData:
    form = aiohttp.FormData()
    for filename, data in photos:
        form.add_field(field, data, filename=filename, content_type="image/jpeg")
    return form


@contextlib.asynccontextmanager
async def _node_of_few_photos(engine, data_dir: Path, photos_per_face: int):
    """A node whose faces are made of at most ``photos_per_face`` photos."""
    config = load_config(environ={}, overrides={
        "server": {"data_dir": str(data_dir)}, "rtmp": {"port": 0},
        "webrtc": {"host_addresses": ["127.0.0.1"]}, "auth": {"jwt_secret": TEST_SECRET},
        "quotas": {"photos_per_face": photos_per_face},
    })
    client = TestClient(TestServer(build_app(config, engine=engine), host="127.0.0.1"), headers=ALICE)
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


def test_a_face_is_made_of_several_photos_and_grows_by_added_ones(engine, astronaut_image, tmp_path):
    async def scenario():
        async with _node_of_few_photos(engine, tmp_path, photos_per_face=3) as client:
            form = _photos_form(("left.jpg", jpeg(astronaut_image)), ("right.jpg", jpeg(_mirrored(astronaut_image))))
            made = await client.post("/api/v1/faces", data=form)
            face = await made.json()
            library = client.server.app[FACES_KEY]
            merged_identity = (await library.get(face["id"])).source.identity
            smaller = cv2.resize(astronaut_image, (320, 320), interpolation=cv2.INTER_AREA)
            added = await client.post(f"/api/v1/faces/{face['id']}/photos", data=jpeg(smaller),
                                      headers={"Content-Type": "image/jpeg"})
            grown = await added.json()
            full = await client.post(f"/api/v1/faces/{face['id']}/photos", data=jpeg(astronaut_image),
                                     headers={"Content-Type": "image/jpeg"})
            listed = [f for f in await (await client.get("/api/v1/faces")).json() if f["id"] == face["id"]]
            stored = await library.store.get_face(face["id"], photos=True)
            return made.status, face, merged_identity, added.status, grown, full.status, await full.json(), \
                listed, stored

    made, face, merged_identity, added, grown, full, full_body, listed, stored = run(scenario(), timeout=120)
    assert made == 201 and face["name"] == "left" and face["photos"] == 2
    assert merged_identity.shape == (128,)
    assert (added, grown["id"], grown["photos"]) == (200, face["id"], 3)
    assert full == 409 and "more than 3" in full_body["error"]
    assert [f["photos"] for f in listed] == [3]
    # the face keeps its photos cropped to the head, each a JPEG it can be made again from
    assert stored.photo_count == 3 and len(stored.photos) == 3
    assert all(photo[:2] == b"\xff\xd8" and len(photo) < 300_000 for photo in stored.photos)


def test_a_photo_of_someone_else_is_refused_naming_it(engine, astronaut_image, grace_image, tmp_path):
    async def scenario():
        async with _node_of_few_photos(engine, tmp_path, photos_per_face=4) as client:
            mixed = await client.post("/api/v1/faces", data=_photos_form(
                ("buzz.jpg", jpeg(astronaut_image)), ("grace.jpg", jpeg(grace_image))))
            face = await _upload(client, astronaut_image, ALICE)
            added = await client.post(f"/api/v1/faces/{face['id']}/photos", data=jpeg(grace_image),
                                      headers={"Content-Type": "image/jpeg"})
            after = await client.server.app[FACES_KEY].store.get_face(face["id"], photos=True)
            listed = [f["id"] for f in await (await client.get("/api/v1/faces")).json() if f["owner"] == "alice"]
            return mixed.status, await mixed.json(), added.status, await added.json(), after, face, listed

    mixed, mixed_body, added, added_body, after, face, listed = run(scenario(), timeout=120)
    assert mixed == 422 and mixed_body["error"].startswith("photo 2 (grace.jpg) shows someone else")
    assert added == 422 and "shows someone else than the face's photos" in added_body["error"]
    assert after.photo_count == 1 and len(after.photos) == 1  # the refused photo changed nothing
    assert listed == [face["id"]]  # the refused upload stored no face


def test_hostile_photo_uploads_are_4xx_with_their_reason(engine, astronaut_image, tmp_path):
    photo = jpeg(astronaut_image)

    async def scenario():
        async with _node_of_few_photos(engine, tmp_path, photos_per_face=2) as client:
            answers = {
                "too many": await client.post("/api/v1/faces", data=_photos_form(*[("a.jpg", photo)] * 3)),
                "not an image": await client.post("/api/v1/faces", data=_photos_form(
                    ("a.jpg", photo), ("notes.jpg", b"%PDF-1.4 not a photo"))),
                "too large": await client.post("/api/v1/faces", data=_photos_form(
                    ("a.jpg", photo), ("huge.jpg", b"\xff\xd8" + bytes(11 * 1024 * 1024)))),
                "no image field": await client.post("/api/v1/faces", data=_photos_form(("a.jpg", photo), field="picture")),
                "to a sample": await client.post("/api/v1/faces/astronaut/photos", data=photo,
                                                 headers={"Content-Type": "image/jpeg"}),
            }
            face = await _upload(client, astronaut_image, ALICE)
            answers["to bob's"] = await client.post(f"/api/v1/faces/{face['id']}/photos", data=photo,
                                                    headers={**BOB, "Content-Type": "image/jpeg"})
            answers["past the bound"] = await client.post(f"/api/v1/faces/{face['id']}/photos",
                                                          data=_photos_form(("b.jpg", photo), ("c.jpg", photo)))
            return {key: (answer.status, (await answer.json())["error"]) for key, answer in answers.items()}

    got = run(scenario(), timeout=120)
    assert got["too many"][0] == 413 and "a face is made of at most 2" in got["too many"][1]
    assert got["not an image"][0] == 415 and got["not an image"][1].startswith("photo 2 (notes.jpg): ")
    assert got["too large"][0] == 413 and got["too large"][1].startswith("photo 2 (huge.jpg): ")
    assert got["no image field"][0] == 400 and 'field named "image"' in got["no image field"][1]
    assert got["to a sample"][0] == 403
    assert got["to bob's"][0] == 404
    assert got["past the bound"][0] == 409 and "more than 2" in got["past the bound"][1]


def test_a_face_stored_before_faces_kept_photos_still_works(engine, astronaut_image, tmp_path):
    async def scenario():
        async with node(engine, tmp_path, subject="alice") as client:
            library = client.server.app[FACES_KEY]
            fresh = await _upload(client, astronaut_image, ALICE)
            stored = await library.store.get_face(fresh["id"])
            old = FaceRecord("u-0123456789ab", "Old", stored.thumbnail_jpeg, stored.source, owner="alice")
            await library.store.put_face(old)  # as stored before: no photos, no count
            listed = [f for f in await (await client.get("/api/v1/faces")).json() if f["id"] == old.id]
            used = await library.get(old.id)
            added = await client.post(f"/api/v1/faces/{old.id}/photos", data=jpeg(astronaut_image),
                                      headers={"Content-Type": "image/jpeg"})
            return listed, used, added.status, await added.json()

    listed, used, added, added_body = run(scenario(), timeout=120)
    assert [(f["name"], f["photos"]) for f in listed] == [("Old", 1)]
    assert used.photo_count == 1 and used.source.identity.shape == (128,)
    assert added == 409 and "stored before faces kept their photos" in added_body["error"]
