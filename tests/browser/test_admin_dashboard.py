"""The operator dashboard (web/admin/) driven by real Chromium against a real node.

A node runs as ``swapcast serve`` in a subprocess with an HS256 secret. A test client (an
aiortc peer on its own event loop in a background thread, since Playwright's sync API blocks)
starts a live session as the user "alice". An operator with an admin token then opens
``/admin/``, sees the node and alice's session with its numbers, watches it through the
WHEP preview, and kills it: the row goes, the API says 404 and the client's media stops.
The operator also changes a live session's swap options from the dashboard (the API shows
them changed, a bad value is refused with the server's reason) and sees the processors its
node loaded (an XSeg occluder twin in the node's models folder).
A user token is told the admin role is required; no token, or a forged one, is asked to
sign in.

Screenshots go to the test's tmp_path and, when ``SWAPCAST_SCREENSHOTS`` names a
directory, there too. Needs Debian's ``chromium`` (``/usr/bin/chromium``, or
``SWAPCAST_CHROMIUM``); Playwright's own browser download is never used.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))  # the aiortc client helpers

from browser_harness import http_json, pictures, screenshot, serve_node, wait_for
from model_twins import make_xseg
from webrtc_harness import answer, camera_offer, client_peer, collect_video

from signaling.auth import mint_token
from swapcast.benchmarks.chromium import HEADLESS_FLAGS, chromium_path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

CHROMIUM = chromium_path()
FACE_ID = "astronaut"

PREVIEW_PLAYING_JS = """() => {
  const v = document.getElementById('preview-video');
  return v.readyState >= 2 && v.currentTime > 0.3 && v.videoWidth > 0;
}"""


# --- helpers ---------------------------------------------------------------------------------


_http = http_json


class AiortcClient:
    """A test client's live session: an aiortc peer sending a moving face and collecting the
    swapped video, on its own asyncio loop in a background thread."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url, self.token = base_url, token
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="aiortc-test-client", daemon=True)
        self.thread.start()
        self.pc = None
        self.collector = None
        self.session_id: str | None = None

    def _call(self, coroutine, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def _start(self) -> str:
        self.pc = client_peer()
        self.collector = collect_video(self.pc)
        sdp = await camera_offer(self.pc)
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http,
            http.post(
                f"{self.base_url}/api/v1/sessions",
                json={"face_id": FACE_ID, "sdp": sdp, "type": "offer"},
                headers={"Authorization": f"Bearer {self.token}"},
            ) as response,
        ):
            body = await response.json()
            assert response.status == 201, (response.status, body)
        await answer(self.pc, body["sdp"])
        return body["session_id"]

    def start(self) -> str:
        self.session_id = self._call(self._start())
        return self.session_id

    async def _read(self) -> tuple[str, int]:
        return self.pc.connectionState, self.collector.count

    def read(self) -> tuple[str, int]:
        """(connection state, frames received so far), read on the client's own loop."""
        return self._call(self._read(), 5)

    def wait_frames(self, count: int, timeout: float = 20.0) -> None:
        self._call(self.collector.wait_for(count, timeout), timeout + 5)

    def media_ended(self, quiet_s: float = 1.5, timeout_s: float = 12.0) -> tuple[str, int] | None:
        """Wait for the connection to close/fail or the frames to stop for ``quiet_s``;
        returns (state, frames) when one happened, None if media still flows."""
        deadline = time.monotonic() + timeout_s
        last_count, last_change = self.read()[1], time.monotonic()
        while time.monotonic() < deadline:
            state, count = self.read()
            if state in ("closed", "failed"):
                return state, count
            if count != last_count:
                last_count, last_change = count, time.monotonic()
            elif time.monotonic() - last_change >= quiet_s:
                return state, count
            time.sleep(0.1)
        return None

    def close(self) -> None:
        async def shutdown() -> None:
            if self.collector is not None:
                await self.collector.stop()
            if self.pc is not None:
                await self.pc.close()

        try:
            self._call(shutdown(), 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real node with JWT auth: ``swapcast serve`` on a free loopback port, with an occluder
    (an XSeg twin) in its models folder."""
    models = tmp_path_factory.mktemp("admin-models")
    make_xseg(models / "xseg_1.onnx")
    with serve_node(tmp_path_factory.mktemp("admin-node"), secrets.token_urlsafe(32),
                    SWAPCAST_ENGINE__MODELS_DIR=str(models)) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def admin_token(server) -> str:
    return mint_token(server.secret, "ops", role="admin")


@pytest.fixture(scope="module")
def alice_token(server) -> str:
    return mint_token(server.secret, "alice")


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install chromium, or set SWAPCAST_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=list(HEADLESS_FLAGS), timeout=30_000)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def open_admin(browser, server):
    """Open ``/admin/`` (with ``#token=...`` when given), each page in a fresh context (no
    token left in localStorage from another test); closed after the test."""
    contexts = []

    def open_page(token: str | None = None):
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        contexts.append(context)
        context.set_default_timeout(15_000)
        page = context.new_page()
        page.errors = []
        page.on("pageerror", lambda err: page.errors.append(str(err)))
        page.goto(f"{server}/admin/" + (f"#token={token}" if token else ""))
        return page

    yield open_page
    for context in contexts:
        context.close()


@pytest.fixture
def test_client(server, alice_token):
    client = AiortcClient(server, alice_token)
    yield client
    client.close()


# --- tests -----------------------------------------------------------------------------------


def test_operator_watches_and_kills_a_live_session(open_admin, server, admin_token, test_client, tmp_path):
    session_id = test_client.start()
    test_client.wait_frames(5)

    def session_live():
        status, body = _http("GET", f"{server}/api/v1/sessions/{session_id}", admin_token)
        return status == 200 and (body.get("stats") or {}).get("fps_out", 0) > 0 and body

    assert wait_for(session_live, 20), _http("GET", f"{server}/api/v1/sessions/{session_id}", admin_token)
    status, nodes = _http("GET", f"{server}/api/v1/nodes", admin_token)
    assert status == 200 and len(nodes) == 1, (status, nodes)
    node_id = nodes[0]["id"]

    page = open_admin(admin_token)
    assert "#token" not in page.url  # the token leaves the address bar (kept in localStorage)
    row = f'tr[data-session-id="{session_id}"]'

    # The node and the session, with its owner and live numbers.
    page.wait_for_selector(f'tr[data-node-id="{node_id}"][data-state="ready"]')
    page.wait_for_selector(row)
    assert page.is_hidden("#auth-message")
    page.wait_for_function(
        f"""() => Number(document.querySelector('{row} td[data-col="fps"]')?.dataset.fpsOut || 0) > 0""",
        timeout=15_000,
    )
    assert page.get_attribute(row, "data-owner") == "alice"
    assert page.get_attribute(row, "data-protocol") == "webrtc"
    assert page.get_attribute(row, "data-state") == "live"
    assert page.inner_text(f'{row} td[data-col="owner"]') == "alice"
    assert page.inner_text(f'{row} td[data-col="node"]').strip("…") in node_id
    page.wait_for_function(f"""() => !document.querySelector('{row} td[data-col="stages"]').textContent.includes('–')""")
    stages = page.inner_text(f'{row} td[data-col="stages"]')
    assert all(name in stages for name in ("track", "id", "prep", "run", "paste")), stages
    assert "ms" in page.inner_text(f'{row} td[data-col="latency"]')
    node_row = f'tr[data-node-id="{node_id}"]'
    assert page.inner_text(f'{node_row} td[data-col="gpu"]') == nodes[0]["gpu"]

    # Rows are updated in place: the same element across several refreshes.
    handle = page.query_selector(row)
    handle.evaluate("el => { el.dataset.marker = 'kept'; }")
    time.sleep(2.5)
    assert handle.evaluate("el => el.isConnected && el.dataset.marker === 'kept'")

    # Preview: a WHEP viewer of the session plays in the side panel.
    page.click(f'{row} button[data-action="preview"]')
    page.wait_for_function(PREVIEW_PLAYING_JS, timeout=30_000)
    t0 = page.evaluate("() => document.getElementById('preview-video').currentTime")
    page.wait_for_function(f"() => document.getElementById('preview-video').currentTime > {t0} + 0.5", timeout=10_000)
    assert page.get_attribute(f'{row} button[data-action="preview"]', "aria-pressed") == "true"
    assert wait_for(lambda: _http("GET", f"{server}/api/v1/sessions/{session_id}", admin_token)[1].get("viewers") == 1, 5)
    time.sleep(0.5)
    shot = screenshot(page, tmp_path, "admin-dashboard-preview.png")
    print("screenshot:", shot)

    # Kill, with the inline confirmation (no blocking dialog).
    page.click(f'{row} button[data-action="kill"]')
    page.wait_for_selector(f'{row} button[data-action="confirm-kill"]:visible')
    assert page.is_hidden(f'{row} button[data-action="kill"]')
    screenshot(page, tmp_path, "admin-kill-confirm.png")
    frames_before_kill = test_client.read()[1]
    page.click(f'{row} button[data-action="confirm-kill"]')

    page.wait_for_selector(row, state="detached", timeout=10_000)
    status, body = _http("GET", f"{server}/api/v1/sessions/{session_id}", admin_token)
    assert status == 404, (status, body)
    ended = test_client.media_ended()
    assert ended is not None, f"the client's media still flows after the kill: {test_client.read()}"
    assert ended[1] >= frames_before_kill
    print("test client after the kill (connection, frames):", ended)

    # The preview closed with it, and later refreshes do not bring the row back.
    assert page.evaluate("() => document.getElementById('preview-video').srcObject") is None
    assert page.is_hidden("#preview-close")
    time.sleep(2.0)
    assert page.query_selector(row) is None
    assert page.is_visible("#sessions-empty")
    assert page.is_hidden("#message"), page.inner_text("#message")
    screenshot(page, tmp_path, "admin-after-kill.png")
    assert not page.errors, page.errors


def test_operator_changes_a_live_sessions_options(open_admin, server, admin_token, alice_token, test_client, tmp_path):
    session_id = test_client.start()
    test_client.wait_frames(3)
    url = f"{server}/api/v1/sessions/{session_id}"
    status, before = _http("GET", url, admin_token)
    assert status == 200 and before["options"]["occlusion"] == "off" and before["options"]["mouth_mask"] is False, before
    status, nodes = _http("GET", f"{server}/api/v1/nodes", admin_token)
    assert status == 200 and [p["kind"] for p in nodes[0]["processors"]] == ["occluder"], nodes

    page = open_admin(admin_token)
    row = f'tr[data-session-id="{session_id}"]'
    page.wait_for_selector(f'{row}[data-state="live"]')
    page.click(f'{row} button[data-action="options"]')
    page.wait_for_selector(f'#session-options[data-session-id="{session_id}"]:visible')
    assert page.get_attribute(f'{row} button[data-action="options"]', "aria-pressed") == "true"
    assert page.input_value("#option-occlusion") == "off" and not page.is_checked("#option-mouth_mask")
    assert float(page.input_value("#option-blend")) == before["options"]["blend"]
    assert page.is_checked("#option-enabled")
    assert page.inner_text("#options-processors") == "occluder xseg_1"  # what the node loaded

    # Edit three options; refreshes meanwhile leave the edits alone.
    page.select_option("#option-occlusion", "auto")
    page.click('label[for="option-mouth_mask"]')
    page.fill("#option-blend", "0.6")
    assert page.get_attribute("#options-status", "data-state") == "pending"
    time.sleep(1.5)
    assert page.input_value("#option-occlusion") == "auto" and page.is_checked("#option-mouth_mask")
    started = time.perf_counter()
    page.click("#options-apply")
    page.wait_for_selector('#options-status[data-state="ok"]')
    print(f"options applied through the dashboard in {1000 * (time.perf_counter() - started):.0f} ms (click to confirmation)")
    status, after = _http("GET", url, admin_token)
    assert status == 200, (status, after)
    assert (after["options"]["occlusion"], after["options"]["mouth_mask"], after["options"]["blend"]) == ("auto", True, 0.6)
    untouched = {k: v for k, v in before["options"].items() if k not in ("occlusion", "mouth_mask", "blend")}
    assert {k: after["options"][k] for k in untouched} == untouched
    assert after["enabled"] is True
    frames = test_client.read()[1]
    test_client.wait_frames(frames + 5)  # the swap goes on with the new options
    screenshot(page, tmp_path, "admin-session-options.png")

    # A value out of the schema's range: the server's reason is shown, nothing changes.
    page.fill("#option-feather", "0.9")
    page.click("#options-apply")
    page.wait_for_selector('#options-status[data-state="error"]')
    refusal = page.inner_text("#options-status")
    assert "feather" in refusal and "0.5" in refusal, refusal
    assert _http("GET", url, admin_token)[1]["options"]["feather"] == before["options"]["feather"]
    screenshot(page, tmp_path, "admin-session-options-refused.png")

    # Reverted, the panel follows the session again: a change by its owner shows up.
    page.click("#options-revert")
    assert float(page.input_value("#option-feather")) == before["options"]["feather"]
    status, _ = _http("PATCH", url, alice_token, json.dumps({"options": {"eyes": "source"}}).encode(), "application/json")
    assert status == 200
    page.wait_for_function("() => document.getElementById('option-eyes').value === 'source'", timeout=5_000)

    # The people the session sees, each with a face of the map: the camera's one person wears the astronaut.
    page.wait_for_selector("#options-people:not([hidden]) li[data-person-id] img", timeout=15_000)
    person = page.get_attribute("#options-people li[data-person-id]", "data-person-id")
    page.select_option(f'select[name="map:{person}"]', "astronaut")
    page.click("#options-apply")
    page.wait_for_selector('#options-status[data-state="ok"]')
    mapped = _http("GET", url, admin_token)[1]
    assert mapped["options"]["faces_map"] == {person: "astronaut"}, mapped["options"]
    assert [p["wears"] for p in mapped["people"] if p["id"] == person] == ["astronaut"]
    page.wait_for_function(f"() => document.querySelector('select[name=\"map:{person}\"]').value === 'astronaut'")

    # The swap switch turns the swap off live.
    page.click('label[for="option-enabled"]')
    page.click("#options-apply")
    page.wait_for_selector('#options-status[data-state="ok"]')
    assert _http("GET", url, admin_token)[1]["enabled"] is False
    page.click("#options-close")
    assert page.is_hidden("#session-options")
    assert page.get_attribute(f'{row} button[data-action="options"]', "aria-pressed") == "false"
    assert not page.errors, page.errors


def test_every_picture_on_the_dashboard_loads(open_admin, server, admin_token, test_client, tmp_path):
    """Each session row shows the face it wears; an <img> sends no token, so the picture
    comes from the signed link of the face list."""
    session_id = test_client.start()
    page = open_admin(admin_token)
    thumb = f'tr[data-session-id="{session_id}"] img.face-thumb'
    page.wait_for_selector(f"{thumb}:not([hidden])")
    shown = pictures(page)
    assert shown and all(p["loaded"] for p in shown), shown
    assert all("token" not in p["src"] for p in shown), shown
    status, faces = _http("GET", f"{server}/api/v1/faces", admin_token)
    assert status == 200
    assert page.get_attribute(thumb, "title") == {f["id"]: f["name"] for f in faces}[FACE_ID]
    screenshot(page, tmp_path, "admin-face-pictures.png")
    assert not page.errors, page.errors


def test_drain_and_make_ready_a_node(open_admin, server, admin_token, tmp_path):
    status, nodes = _http("GET", f"{server}/api/v1/nodes", admin_token)
    assert status == 200, (status, nodes)
    node_row = f'tr[data-node-id="{nodes[0]["id"]}"]'
    page = open_admin(admin_token)
    page.wait_for_selector(f'{node_row}[data-state="ready"]')
    assert page.is_hidden(f'{node_row} button[data-action="ready"]')
    try:
        page.click(f'{node_row} button[data-action="drain"]')
        page.wait_for_selector(f'{node_row}[data-state="draining"] button[data-action="ready"]:visible')
        assert _http("GET", f"{server}/api/v1/nodes", admin_token)[1][0]["state"] == "draining"
        time.sleep(1.2)  # a refresh keeps the state
        assert page.get_attribute(node_row, "data-state") == "draining"
        screenshot(page, tmp_path, "admin-node-draining.png")
        page.click(f'{node_row} button[data-action="ready"]')
        page.wait_for_selector(f'{node_row}[data-state="ready"] button[data-action="drain"]:visible')
    finally:
        _http("POST", f"{server}/api/v1/nodes/{nodes[0]['id']}/ready", admin_token)
    assert _http("GET", f"{server}/api/v1/nodes", admin_token)[1][0]["state"] == "ready"
    assert not page.errors, page.errors


def test_a_user_token_is_told_the_admin_role_is_required(open_admin, server, alice_token, tmp_path):
    # the server's answer: admin routes are closed to users
    status, body = _http("GET", f"{server}/api/v1/nodes", alice_token)
    assert status == 403, (status, body)

    page = open_admin(alice_token)
    page.wait_for_selector('#auth-message[data-reason="forbidden"]:visible')
    text = page.inner_text("#auth-message")
    assert "admin role required" in text.lower() and "alice" in text, text
    assert page.is_hidden("#dashboard")
    screenshot(page, tmp_path, "admin-forbidden.png")
    assert not page.errors, page.errors


def test_without_a_valid_token_the_page_asks_to_sign_in(open_admin, server, tmp_path):
    page = open_admin()
    page.wait_for_selector('#auth-message[data-reason="signin"]:visible')
    assert "sign in" in page.inner_text("#auth-message").lower()
    assert page.is_hidden("#dashboard")
    screenshot(page, tmp_path, "admin-sign-in.png")

    # a token signed with another secret is refused (401): the same sign-in message
    forged = mint_token(secrets.token_urlsafe(32), "mallory", role="admin")
    assert _http("GET", f"{server}/api/v1/nodes", forged)[0] == 401
    page = open_admin(forged)
    page.wait_for_selector('#auth-message[data-reason="signin"]:visible')
    assert "sign in" in page.inner_text("#auth-message").lower()
    assert page.is_hidden("#dashboard")
    assert not page.errors, page.errors
