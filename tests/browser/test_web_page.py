"""The page in web/ driven by real Chromium against a real swapcast node.

A fake camera (a .y4m of Grace Hopper moving in front of the lens) feeds the page; the node
runs as ``swapcast serve`` in a subprocess; frames grabbed from the page's swapped <video>
are scored with dlib identity (the conftest ``identity_of``): with the astronaut chosen as
the source they must look like the astronaut, with the swap switched off like Grace Hopper.

Needs Debian's ``chromium`` (``/usr/bin/chromium``, or ``SWAPCAST_CHROMIUM``); Playwright's
own browser download is never used.
"""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from browser_harness import (
    REMOTE_PLAYING_JS,
    grab_frames,
    http_json,
    identity_votes,
    pictures,
    screenshot,
    serve_node,
    wait_for,
    write_y4m,
)

from signaling.auth import mint_token
from signaling.auth.signed_urls import UrlSigner
from streamer.samples import grace_hopper, moving_face_frames
from swapcast.benchmarks.chromium import HEADLESS_FLAGS, chromium_path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CHROMIUM = chromium_path()
REMOTE_PLAYING_TIMEOUT_MS = 30_000

CHROMIUM_FLAGS = [*HEADLESS_FLAGS, "--use-fake-device-for-media-stream"]
SECRET = "swapcast-browser-tests-" + "b" * 32
TOKEN = mint_token(SECRET, "page-user")  # the page and these tests act as one user
OTHER_TOKEN = mint_token(SECRET, "other-user")

DENY_CAMERA_JS = """
Object.defineProperty(navigator.mediaDevices, 'getUserMedia', {
  configurable: true,
  value: () => Promise.reject(new DOMException('Permission denied', 'NotAllowedError')),
});
"""


# --- helpers ---------------------------------------------------------------------------------


def _http(method: str, url: str, body: bytes | None = None, content_type: str | None = None, timeout: float = 10):
    """As the page's user: (status, parsed JSON or None) without raising on 4xx/5xx."""
    return http_json(method, url, TOKEN, body, content_type, timeout)


def _sessions(base_url: str) -> list:
    status, body = _http("GET", f"{base_url}/api/v1/sessions")
    assert status == 200, (status, body)
    return body


def _photo(image: np.ndarray, path: Path) -> Path:
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    assert ok
    path.write_bytes(jpeg.tobytes())
    return path


def _face_id(faces: list[dict], word: str) -> str:
    for face in faces:
        if word in face["id"].lower() or word in face["name"].lower().replace(" ", "_"):
            return face["id"]
    raise AssertionError(f"no sample face like {word!r} in {faces}")


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_camera(tmp_path_factory) -> Path:
    """~4 s of Grace Hopper moving (640x480, 30 fps); Chromium loops it."""
    path = tmp_path_factory.mktemp("camera") / "grace.y4m"
    write_y4m(path, moving_face_frames(grace_hopper(), 120, size=(640, 480)))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real node: ``swapcast serve`` on a free loopback port, at most one live session."""
    with serve_node(tmp_path_factory.mktemp("node"), SECRET, SWAPCAST_WEBRTC__MAX_SESSIONS="1") as base_url:
        yield base_url


@pytest.fixture(scope="module")
def browser(fake_camera):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install chromium, or set SWAPCAST_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[*CHROMIUM_FLAGS, f"--use-file-for-fake-video-capture={fake_camera}"],
            timeout=30_000,
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def new_page(browser, server):
    """Pages on the node's index, each in its own context; all closed after the test."""
    contexts = []

    def open_page(init_script: str | None = None, token: str = TOKEN):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        context.set_default_timeout(15_000)
        if init_script:
            context.add_init_script(init_script)
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda err: page.errors.append(str(err)))
        page.goto(f"{server}/#token={token}")
        page.wait_for_selector(".face[data-face-id]", timeout=30_000)
        return page

    yield open_page
    for context in contexts:
        context.close()


@pytest.fixture(scope="module")
def faces(server) -> list[dict]:
    status, body = _http("GET", f"{server}/api/v1/faces")
    assert status == 200, body
    return body


# --- tests -----------------------------------------------------------------------------------


def test_live_swap_controls_and_stop(new_page, server, faces, identity_of, astronaut_image, grace_image, tmp_path):
    astronaut = _face_id(faces, "astronaut")
    grace = _face_id(faces, "grace")
    astronaut_id, grace_id = identity_of(astronaut_image), identity_of(grace_image)

    page = new_page()
    page.click(f'.face[data-face-id="{astronaut}"]')
    assert page.get_attribute(f'.face[data-face-id="{astronaut}"]', "aria-checked") == "true"
    page.click("#start")
    page.wait_for_function(REMOTE_PLAYING_JS, timeout=REMOTE_PLAYING_TIMEOUT_MS)
    assert page.is_enabled("#stop") and page.is_disabled("#start")

    (session,) = _sessions(server)
    assert session["face_id"] == astronaut

    # The browser sends H.264 at the camera's full 640x480 (maintain-resolution).
    page.wait_for_function("() => document.getElementById('stat-fps-out').textContent !== '–'", timeout=8_000)
    rtp = page.evaluate("() => window.swapcast.live.rtpStats()")
    assert rtp["sent"]["codec"].lower() == "video/h264", rtp
    assert (rtp["sent"]["width"], rtp["sent"]["height"]) == (640, 480), rtp

    time.sleep(1.0)  # past the first keyframes and the face tracker's warm-up
    page.screenshot(path=str(tmp_path / "live.png"))
    swapped = grab_frames(page, 6)
    assert swapped[0].shape[:2] == (480, 640)
    votes_astronaut, votes_grace, distances = identity_votes(swapped, identity_of, astronaut_id, grace_id)
    print("swap on, (d astronaut, d grace) per frame:", distances)
    assert votes_astronaut > len(swapped) // 2, f"swapped frames should look like the astronaut: {distances}"

    # The second page finds the node full (max_sessions = 1) and says so.
    other = new_page()
    other.click("#start")
    other.wait_for_selector("#message:not([hidden])", timeout=15_000)
    assert "server is full" in other.inner_text("#message").lower()
    assert other.is_enabled("#start")
    assert len(_sessions(server)) == 1

    # Live controls are PATCHes on the same session: no renegotiation, same session id.
    page.fill("#blend", "0.5")
    page.dispatch_event("#blend", "change")
    page.click("label[for=mouth-mask]")
    page.select_option("#face-selection", "largest")

    def options_applied():
        status, body = _http("GET", f"{server}/api/v1/sessions/{session['id']}")
        opts = body.get("options", {}) if status == 200 else {}
        return opts.get("blend") == 0.5 and opts.get("mouth_mask") is True and opts.get("face_selection") == "largest"

    assert wait_for(options_applied, 10), _http("GET", f"{server}/api/v1/sessions/{session['id']}")[1]["options"]

    # A change the server refuses: its reason is shown and the control goes back.
    # ('reference' is disabled in the page: live sessions take no reference photo yet.)
    page.evaluate("() => { document.querySelector('#face-selection option[value=reference]').disabled = false; }")
    page.select_option("#face-selection", "reference")
    page.wait_for_selector("#message:not([hidden])", timeout=5_000)
    assert "reference" in page.inner_text("#message-text")
    page.wait_for_function("() => document.getElementById('face-selection').value === 'largest'", timeout=5_000)
    page.click("#message-close")
    assert _sessions(server)[0]["options"]["face_selection"] == "largest"

    page.fill("#blend", "1")
    page.dispatch_event("#blend", "change")
    page.click("label[for=mouth-mask]")

    # Swap off: the swapped video shows the camera's own face again.
    page.click("label[for=swap-enabled]")
    assert page.is_visible("#swap-badge")
    time.sleep(1.5)
    plain = grab_frames(page, 6)
    votes_astronaut, votes_grace, distances = identity_votes(plain, identity_of, astronaut_id, grace_id)
    print("swap off, (d astronaut, d grace) per frame:", distances)
    assert votes_grace > len(plain) // 2, f"with the swap off the frames should look like Grace Hopper: {distances}"

    # Changing the source face is a PATCH too.
    page.click("label[for=swap-enabled]")
    page.click(f'.face[data-face-id="{grace}"]')
    assert wait_for(lambda: _sessions(server)[0]["face_id"] == grace, 10), _sessions(server)
    assert [s["id"] for s in _sessions(server)] == [session["id"]]

    # The stats overlay is filled from the server's numbers.
    assert page.is_visible("#stats")
    assert page.inner_text("#stat-latency") != "–"

    page.click("#stop")
    assert wait_for(lambda: _sessions(server) == [], 5), _sessions(server)
    assert page.is_enabled("#start") and page.is_disabled("#stop")
    assert page.evaluate("() => document.getElementById('remote-video').srcObject") is None
    assert not page.errors, page.errors


def test_session_ended_by_the_server_then_leaving_the_page(new_page, server, faces):
    page = new_page()
    page.click("#start")
    page.wait_for_function(REMOTE_PLAYING_JS, timeout=REMOTE_PLAYING_TIMEOUT_MS)
    (session,) = _sessions(server)

    # The server ends the session (here: an operator's DELETE): the page notices, says so,
    # releases the camera and can start again.
    assert _http("DELETE", f"{server}/api/v1/sessions/{session['id']}")[0] == 204
    page.wait_for_selector("#message:not([hidden])", timeout=8_000)
    assert "press start camera to try again" in page.inner_text("#message").lower()
    assert page.is_enabled("#start") and page.is_disabled("#stop")
    assert page.evaluate("() => document.getElementById('local-video').srcObject") is None

    page.click("#start")
    page.wait_for_function(REMOTE_PLAYING_JS, timeout=REMOTE_PLAYING_TIMEOUT_MS)
    (session,) = _sessions(server)
    page.goto("about:blank")  # pagehide -> keepalive DELETE, then the peer connection closes
    assert wait_for(lambda: _sessions(server) == [], 5), _sessions(server)
    # The page itself said goodbye (not only the server noticing the dead peer).
    delete_line = f'"DELETE /api/v1/sessions/{session["id"]} HTTP'
    assert wait_for(lambda: delete_line in server.log_path.read_text(errors="replace"), 3), "no DELETE on pagehide"


def test_upload_without_a_face_shows_the_reason(new_page, server, tmp_path):
    blank = np.full((240, 320, 3), (120, 160, 200), np.uint8)
    ok, png = cv2.imencode(".png", blank)
    assert ok
    path = tmp_path / "no-face.png"
    path.write_bytes(png.tobytes())
    status, body = _http("POST", f"{server}/api/v1/faces", png.tobytes(), "image/png")
    assert status == 422 and body["error"], (status, body)

    page = new_page()
    before = page.locator(".face[data-face-id]").count()
    page.set_input_files("#upload", str(path))
    page.wait_for_selector("#message:not([hidden])", timeout=15_000)
    assert body["error"] in page.inner_text("#message")
    assert page.get_attribute("#message", "data-kind") == "error"
    assert page.locator(".face[data-face-id]").count() == before


def test_upload_of_a_face_adds_and_selects_it(new_page, server, astronaut_image, tmp_path):
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(astronaut_image, cv2.COLOR_RGB2BGR))
    assert ok
    path = tmp_path / "me.jpg"
    path.write_bytes(jpeg.tobytes())
    page = new_page()
    before = page.locator(".face[data-face-id]").count()
    page.set_input_files("#upload", str(path))
    page.wait_for_function(f"() => document.querySelectorAll('.face[data-face-id]').length === {before + 1}")
    selected = page.get_attribute('.face[aria-checked="true"]', "data-face-id")
    assert selected == page.evaluate("() => window.swapcast.faceId")
    assert selected in {face["id"] for face in _http("GET", f"{server}/api/v1/faces")[1]}


def test_several_photos_of_one_person_make_one_face_and_someone_else_is_refused(new_page, server, astronaut_image,
                                                                                 grace_image, tmp_path):
    left = _photo(astronaut_image, tmp_path / "buzz left.jpg")
    right = _photo(np.ascontiguousarray(astronaut_image[:, ::-1]), tmp_path / "buzz right.jpg")
    grace = _photo(grace_image, tmp_path / "grace.jpg")
    page = new_page()
    before = page.locator(".face[data-face-id]").count()
    page.set_input_files("#upload", [str(left), str(right)])
    page.wait_for_function(f"() => document.querySelectorAll('.face[data-face-id]').length === {before + 1}")
    selected = page.get_attribute('.face[aria-checked="true"]', "data-face-id")
    listed = {face["id"]: face for face in _http("GET", f"{server}/api/v1/faces")[1]}
    assert (listed[selected]["name"], listed[selected]["photos"]) == ("buzz left", 2)
    assert "from 2 photos" in page.inner_text("#message")

    page.set_input_files("#upload", [str(left), str(grace)])
    page.wait_for_selector('#message[data-kind="error"]', timeout=15_000)
    assert "photo 2 (grace.jpg) shows someone else" in page.inner_text("#message")
    assert page.locator(".face[data-face-id]").count() == before + 1


def test_denied_camera_shows_a_message(new_page, server):
    page = new_page(init_script=DENY_CAMERA_JS)
    page.click("#start")
    page.wait_for_selector("#message:not([hidden])", timeout=5_000)
    assert "camera access was denied" in page.inner_text("#message").lower()
    assert page.is_enabled("#start")
    assert _sessions(server) == []


def test_glass_to_glass_benchmark(browser, server):
    """``run_glass_benchmark`` reads its own barcodes back through a real swap session."""
    from swapcast.benchmarks.glass import run_glass_benchmark

    report = run_glass_benchmark(server, seconds=3, warmup_s=1.0, browser=browser, token=TOKEN)
    print("glass-to-glass:", report)
    # ~30 fps shown for 3 s when the machine is idle; far fewer on a busy 2-core CI box
    assert report["samples"] >= 10, report
    assert report["frames_unreadable"] <= report["frames_shown"] // 10, report
    assert 0 < report["p50_ms"] <= report["p99_ms"] < 2000, report
    # the glass-to-glass time includes the node's own added latency
    assert report["p50_ms"] >= report["server"]["latency_p50_ms"], report
    assert report["server"]["faces_swapped"] >= 1, report  # the canvas camera's face was swapped
    assert (report["sent"]["width"], report["sent"]["height"]) == (640, 480), report
    assert wait_for(lambda: _sessions(server) == [], 5), _sessions(server)


def test_every_face_picture_loads_after_sign_in_upload_rename_and_delete(new_page, server, grace_image, tmp_path):
    page = new_page()
    shown = pictures(page)
    assert len(shown) >= 2 and all(p["loaded"] for p in shown), shown  # the samples
    assert all("token" not in p["src"] for p in shown), shown  # signed links, no bearer token in URLs

    # An upload is named after its file, selected, and its picture loads too.
    before = page.locator(".face[data-face-id]").count()
    page.set_input_files("#upload", str(_photo(grace_image, tmp_path / "Ada Lovelace.jpg")))
    page.wait_for_function(f"() => document.querySelectorAll('.face[data-face-id]').length === {before + 1}")
    face_id = page.evaluate("() => window.swapcast.faceId")
    tile = f'.face[data-face-id="{face_id}"]'
    assert page.inner_text(f"{tile} span") == "Ada Lovelace"
    shown = pictures(page)
    assert len(shown) == before + 1 and all(p["loaded"] for p in shown), shown

    # Renamed from the page: the new name everywhere, every picture still loads.
    assert page.is_visible("#face-edit") and page.input_value("#face-name") == "Ada Lovelace"
    page.fill("#face-name", "Amazing Grace")
    page.click("#face-rename")
    page.wait_for_function(f"() => document.querySelector('{tile} span')?.textContent === 'Amazing Grace'")
    assert {f["id"]: f["name"] for f in _http("GET", f"{server}/api/v1/faces")[1]}[face_id] == "Amazing Grace"
    shown = pictures(page)
    assert len(shown) == before + 1 and all(p["loaded"] for p in shown), shown
    screenshot(page, tmp_path, "web-face-picker.png")

    # A refused name says why, and changes nothing.
    page.fill("#face-name", "x" * 80)
    page.evaluate("() => { document.getElementById('face-name').value += 'y'; }")  # past maxlength
    page.click("#face-rename")
    page.wait_for_selector("#message[data-kind=error]:not([hidden])")
    assert "the limit is 80" in page.inner_text("#message-text")

    # Samples cannot be renamed: no form for them.
    page.click(".face[data-face-id]:not([data-face-id^='u-'])")
    assert page.is_hidden("#face-edit")

    # Deleted from the page: gone from the picker and the API.
    page.click(tile)
    page.click("#face-delete")
    page.wait_for_selector(tile, state="detached")
    assert face_id not in {f["id"] for f in _http("GET", f"{server}/api/v1/faces")[1]}
    assert not page.errors, page.errors


def test_a_user_never_sees_another_users_faces(new_page, server, grace_image):
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(grace_image, cv2.COLOR_RGB2BGR))
    status, face = _http("POST", f"{server}/api/v1/faces?name=private", jpeg.tobytes(), "image/jpeg")
    assert status == 201, face
    thumbnail = f"{server}/api/v1/faces/{face['id']}/thumbnail.jpg"
    item = f"{server}/api/v1/faces/{face['id']}"

    status, listed = http_json("GET", f"{server}/api/v1/faces", OTHER_TOKEN)
    assert status == 200 and face["id"] not in {f["id"] for f in listed}
    missing = {"error": f"no face with id {face['id']!r}"}
    assert http_json("GET", thumbnail, OTHER_TOKEN) == (404, missing)
    assert http_json("PATCH", item, OTHER_TOKEN, b'{"name": "mine"}', "application/json") == (404, missing)
    assert http_json("DELETE", item, OTHER_TOKEN) == (404, missing)
    # a link signed for the other user (as if a face were theirs) does not open this one
    assert http_json("GET", server + UrlSigner(SECRET).sign(thumbnail[len(server):], "other-user")) == (404, missing)

    page = new_page(token=OTHER_TOKEN)
    assert page.locator(f'.face[data-face-id="{face["id"]}"]').count() == 0
    shown = pictures(page)
    assert shown and all(p["loaded"] for p in shown), shown
    assert _http("DELETE", item)[0] == 204


def test_a_signed_thumbnail_link_stops_working_once_expired(new_page, server, faces):
    """The server's links are signed with a key derived from its JWT secret, which this
    test knows: it signs links as the server would have, minutes ago (expired) and now."""
    path = f"/api/v1/faces/{faces[0]['id']}/thumbnail.jpg"
    issued_long_ago = UrlSigner(SECRET, ttl_s=300, clock=lambda: time.time() - 3600).sign(path, "")
    issued_now = UrlSigner(SECRET, ttl_s=300).sign(path, "")
    status, body = http_json("GET", f"{server}{issued_long_ago}")
    assert status == 403 and "expired" in body["error"], (status, body)
    assert http_json("GET", f"{server}{issued_now}")[0] == 200

    page = new_page()
    loaded = page.evaluate("""async (urls) => Promise.all(urls.map((url) => new Promise((resolve) => {
        const img = new Image();
        img.onload = () => resolve(img.naturalWidth > 0);
        img.onerror = () => resolve(false);
        img.src = url;
    })))""", [issued_long_ago, issued_now])
    assert loaded == [False, True]
