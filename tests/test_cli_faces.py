"""``swapcast faces scan`` and ``swapcast swap --map``: map faces in files, by the ids a
scan reported and by reference photos, on a clip of two people (the people set's
crossing, its first second) and a photo of two; ``swapcast faces add``: a face on a server
made of photos of one person."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from gpu.analysis.identity import identity_distance
from signaling.stream_keys import StreamKeyStore
from streamer.media.frames import read_frames
from streamer.media.images import read_image, write_image
from swapcast.benchmarks.people_clips import clip_by_name, photo_of
from test_cli_swap import assert_ok, run_cli
from media_fixtures import write_test_video

sys.path.insert(0, str(Path(__file__).resolve().parent / "webrtc"))

pytestmark = pytest.mark.slow

FRAMES = 30


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("map-faces")
    clip = clip_by_name("cross", quick=True)
    paths = {"video": folder / "two people.mp4"}
    write_test_video(paths["video"], clip.frames[:FRAMES], fps=30, audio=False)
    for person in ("astronaut", "grace_hopper", "third"):
        paths[person] = folder / f"{person}.png"
        write_image(paths[person], photo_of(person))
    paths["truth"] = clip  # type: ignore[assignment]
    return paths


@pytest.fixture(scope="module")
def scanned(files) -> dict:
    run = run_cli("faces", "scan", files["video"], "--json", "--no-progress")
    assert_ok(run)
    return json.loads(run.out)


def who_in_scan(scanned: dict, files, identity_of) -> dict[str, str]:
    """Real person -> the scan's id, by the scan's own descriptors."""
    data = json.loads((files["video"].parent / "two people.mp4.people" / "people.json").read_text())
    out = {}
    for person in ("astronaut", "grace_hopper"):
        own = identity_of(photo_of(person))
        out[person] = min(data["people"], key=lambda p: min(identity_distance(np.array(e), own) for e in p["identity"]))["id"]
    return out


def changed(before: np.ndarray, after: np.ndarray, box: np.ndarray) -> float:
    x0, y0, x1, y1 = (int(v) for v in box)
    return float(np.abs(before[y0:y1, x0:x1].astype(np.float32) - after[y0:y1, x0:x1].astype(np.float32)).mean())


def test_scan_lists_each_person_once_with_a_thumbnail(scanned, files, identity_of):
    people = scanned["people"]
    assert [p["id"] for p in people] == ["person-1", "person-2"]
    assert scanned["frames"] == FRAMES
    for person in people:
        assert person["frames"] == FRAMES and person["first_seen_s"] == 0.0
        assert Path(person["thumbnail"]).is_file() and "identity" not in person
    ids = who_in_scan(scanned, files, identity_of)
    assert sorted(ids.values()) == ["person-1", "person-2"]
    thumbnail = read_image(people[0]["thumbnail"])
    assert identity_distance(identity_of(thumbnail), identity_of(photo_of([p for p, i in ids.items() if i == "person-1"][0]))) < 0.6


def test_swap_by_the_scans_ids(scanned, files, identity_of, tmp_path):
    ids = who_in_scan(scanned, files, identity_of)
    output = tmp_path / "mapped.mp4"
    run = run_cli("swap", "--target", files["video"], "--map", f"{ids['grace_hopper']}={files['third']}",
                  "--map", f"{ids['astronaut']}=keep", "--output", output, "--no-progress")
    assert_ok(run)
    assert f"{ids['grace_hopper']}: 0.0-" in run.out and "wore third.png" in run.out and "wore keep" in run.out
    before, after = read_frames(files["video"]), read_frames(output)
    clip = files["truth"]
    for index in (0, FRAMES // 2, FRAMES - 1):
        truth = {a.person: a.box for a in clip.truth[index]}
        swapped, kept = (changed(before[index], after[index], truth[p]) for p in ("grace_hopper", "astronaut"))
        print(f"frame {index}: mean change in the mapped face {swapped:.1f}, in the kept one {kept:.1f}")
        assert swapped > 3 * kept and kept < 6.0  # kept: re-encoding and the watermark only


def test_swap_by_reference_photos_keeps_the_rest(files, tmp_path):
    output = tmp_path / "by-photo.mp4"
    run = run_cli("swap", "--target", files["video"], "--map", f"{files['astronaut']}={files['grace_hopper']}",
                  "--output", output, "--no-progress")
    assert_ok(run)
    before, after = read_frames(files["video"]), read_frames(output)
    truth = {a.person: a.box for a in files["truth"].truth[10]}
    swapped, kept = (changed(before[10], after[10], truth[p]) for p in ("astronaut", "grace_hopper"))
    assert swapped > 3 * kept and kept < 6.0  # no --source: unmapped people are kept


def test_a_photo_of_two_people(files, two_faces, tmp_path):
    photo = tmp_path / "two.png"
    write_image(photo, two_faces)
    run = run_cli("faces", "scan", photo, "--json", "--out", tmp_path / "scan")
    assert_ok(run)
    assert len(json.loads(run.out)["people"]) == 2 and (tmp_path / "scan" / "people.json").is_file()
    output = tmp_path / "out.png"
    run = run_cli("swap", "--target", photo, "--source", files["third"], "--map", f"{files['astronaut']}=keep",
                  "--output", output)
    assert_ok(run)
    assert "1 of 2 face(s) swapped" in run.out


@pytest.mark.parametrize(("args", "needle"), [
    (["--map", "nothing"], "expected WHO=FACE"),
    (["--map", "person-9=keep"], "not in the scan"),
    (["--map", "missing.jpg=keep"], "is no file"),
    (["--unmapped", "source", "--map", "person-1=keep"], "--unmapped source needs --source"),
    ([], "give --source FACE"),
])
def test_bad_maps_are_refused_with_a_reason(files, scanned, tmp_path, args, needle):
    run = run_cli("swap", "--target", files["video"], *args, "--output", tmp_path / "x.mp4")
    assert run.code == 2 and needle in run.err and "Traceback" not in run.err


def test_keys_store_a_map_of_photos(files, tmp_path, monkeypatch):
    data = tmp_path / "data"
    monkeypatch.setenv("SWAPCAST_SERVER__DATA_DIR", str(data))
    run = run_cli("keys", "add", "--map", f"{files['astronaut']}={files['grace_hopper']}", "--map",
                  f"{files['grace_hopper']}=keep", "--name", "podcast")
    assert_ok(run)
    stored = asdict(StreamKeyStore(data).list()[0].stream)
    assert stored["swap"] == {"unmapped": "keep"} and len(stored["map_photos"]) == 2
    assert all(Path(p).is_file() for pair in stored["map_photos"].items() for p in pair if p != "keep")
    assert "map=2 people" in run_cli("keys", "list").out
    refused = run_cli("keys", "add", "--map", "person-1=keep", "--source", files["third"])
    assert refused.code == 2 and "reference photo" in refused.err


# -- faces add: a face on a server from photos of one person --------------------------------

@contextlib.contextmanager
def served_node(engine, data_dir: Path):
    """A node (the real composition root, behind auth) on a loopback port, its event loop
    in a thread, so the CLI's own ``asyncio.run`` can talk to it; yields its URL and app."""
    from aiohttp import web

    from swapcast.app import build_app
    from webrtc_harness import node_config

    loop = asyncio.new_event_loop()
    app = build_app(node_config(data_dir), engine=engine)
    runner = web.AppRunner(app)

    def serve() -> None:
        loop.run_forever()
        leftover = asyncio.all_tasks(loop)  # connections' handlers the cleanup did not end
        for task in leftover:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def start() -> str:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    try:
        yield asyncio.run_coroutine_threadsafe(start(), loop).result(30), app
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def test_faces_add_uploads_photos_of_one_person_as_one_face(engine, astronaut_image, grace_image, tmp_path):
    from webrtc_harness import TEST_SECRET

    from signaling.auth import mint_token

    photos = {"left": tmp_path / "buzz left.png", "right": tmp_path / "buzz right.png", "grace": tmp_path / "grace.png"}
    write_image(photos["left"], astronaut_image)
    write_image(photos["right"], np.ascontiguousarray(astronaut_image[:, ::-1]))
    write_image(photos["grace"], grace_image)
    token = mint_token(TEST_SECRET, "ann")
    with served_node(engine, tmp_path / "data") as (url, _app):
        server = ("--server", url, "--token", token)
        made = run_cli("faces", "add", photos["left"], photos["right"], *server)
        face_id = made.out.splitlines()[0] if made.code == 0 else ""
        other = run_cli("faces", "add", "--to", face_id, photos["grace"], *server)
        more = run_cli("faces", "add", "--to", face_id, photos["left"], *server)
        missing = run_cli("faces", "add", tmp_path / "missing.png", *server)
        anonymous = run_cli("faces", "add", photos["left"], "--server", url, "--token", "")
    assert_ok(made)
    assert face_id.startswith("u-") and made.out.splitlines()[1] == "buzz left · made of 2 photo(s)"
    assert other.code == 2 and "422 the photo (grace.png) shows someone else than the face's photos" in other.err
    assert_ok(more)
    assert more.out.splitlines() == [face_id, "buzz left · made of 3 photo(s)"]
    assert missing.code == 2 and f"photo {tmp_path / 'missing.png'}: no such file" in missing.err
    assert anonymous.code == 2 and "401" in anonymous.err
