"""A browser on another machine: Chromium opens the page at this machine's own
non-loopback address (not 127.0.0.1, which browsers treat as secure whatever the scheme).

- over plain http:// the page says at once that the camera needs a secure origin;
- over https:// (a throw-away CA made here; Chromium trusts the node's keys through
  ``--ignore-certificate-errors-spki-list``) the camera starts and the swap plays, with the
  media forced through a real coturn ``turnserver`` (``iceTransportPolicy: 'relay'``) on the
  time-limited credentials that came with the session;
- the operator dashboard's preview of that session, relay-only too, plays through the same
  TURN server on the credentials the session read gave the operator;
- a certificate renewed and reloaded (SIGHUP) under a live session leaves it running.

Needs Debian's ``chromium`` and ``coturn`` (scripts/bootstrap installs both).
"""

from __future__ import annotations

import contextlib
import signal
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from browser_harness import REMOTE_PLAYING_JS, grab_frames, http_json, identity_votes, serve_node, wait_for, write_y4m
from tls_testkit import ThrowawayCA, host_ip, peer_certificate_serial, replace_files, turn_server

from signaling.auth import mint_token
from streamer.samples import grace_hopper, moving_face_frames
from swapcast.benchmarks.chromium import HEADLESS_FLAGS, chromium_path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SECRET = "swapcast-secure-origin-tests-" + "s" * 32
TURN_SECRET = "turn-shared-secret-" + "u" * 24
TURN_TTL_S = 120
USER = "remote-user"
TOKEN = mint_token(SECRET, USER)
ADMIN_TOKEN = mint_token(SECRET, "operator", role="admin")

# The page builds its peer connection itself; this makes every one of them relay-only.
RELAY_ONLY_JS = """
(() => {
  const Native = window.RTCPeerConnection;
  window.RTCPeerConnection = class extends Native {
    constructor(config = {}) { super({ ...config, iceTransportPolicy: 'relay' }); }
  };
})();
"""


def selected_pair_js(pc: str) -> str:
    """JS for the candidate pair media flows on (the transport's selected pair) of ``pc``."""
    return """async () => {
  const stats = await PC.getStats();
  const byId = new Map();
  stats.forEach((s) => byId.set(s.id, s));
  let pair = null;
  stats.forEach((s) => { if (s.type === 'transport' && s.selectedCandidatePairId) pair = byId.get(s.selectedCandidatePairId); });
  if (!pair) return null;
  const local = byId.get(pair.localCandidateId), remote = byId.get(pair.remoteCandidateId);
  return {local: local.candidateType, local_address: local.address, remote: remote.candidateType,
          remote_address: remote.address, bytes_received: pair.bytesReceived};
}""".replace("PC", pc)


SELECTED_PAIR_JS = selected_pair_js("window.swapcast.live.pc")
PREVIEW_PLAYING_JS = """() => {
  const v = document.getElementById('preview-video');
  return v.readyState >= 2 && v.currentTime > 0.3 && v.videoWidth > 0;
}"""

FRAMES_DECODED_JS = """async () => {
  let frames = 0;
  (await window.swapcast.live.pc.getStats()).forEach((s) => {
    if (s.type === 'inbound-rtp' && s.kind === 'video') frames = s.framesDecoded || 0;
  });
  return frames;
}"""


@pytest.fixture(scope="module")
def address() -> str:
    return host_ip()


@pytest.fixture(scope="module")
def pki(tmp_path_factory, address):
    """The CA, the node's certificate files (``live``) and the renewal that replaces them."""
    ca = ThrowawayCA(tmp_path_factory.mktemp("pki"))
    names = {"ips": ("127.0.0.1", address)}
    first, renewed, live = ca.issue("first", **names), ca.issue("renewed", **names), ca.issue("live", **names)
    replace_files(first, live)
    return ca, first, renewed, live


@pytest.fixture(scope="module")
def turn(tmp_path_factory):
    with turn_server(tmp_path_factory.mktemp("turn"), TURN_SECRET) as server:
        yield server


@pytest.fixture(scope="module")
def nodes(tmp_path_factory, pki, turn, address):
    """(plain HTTP node, HTTPS node with TURN) on the host address, started side by side."""
    ca, _, _, live = pki
    plain = serve_node(tmp_path_factory.mktemp("http-node"), SECRET, host=address,
                       SWAPCAST_WEBRTC__HOST_ADDRESSES=f'["{address}"]')
    https = serve_node(tmp_path_factory.mktemp("https-node"), SECRET, host=address, ca_file=ca.path,
                       args=("--tls-cert", str(live.cert), "--tls-key", str(live.key)),
                       SWAPCAST_WEBRTC__HOST_ADDRESSES=f'["{address}"]',
                       SWAPCAST_WEBRTC__TURN_URLS=f'["{turn.url}"]', SWAPCAST_WEBRTC__TURN_SHARED_SECRET=TURN_SECRET,
                       SWAPCAST_WEBRTC__TURN_TTL_S=str(TURN_TTL_S))
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(2) as pool:
        started = [pool.submit(stack.enter_context, node) for node in (plain, https)]
        yield tuple(future.result() for future in started)


@pytest.fixture(scope="module")
def http_node(nodes) -> str:
    return nodes[0]


@pytest.fixture(scope="module")
def https_node(nodes) -> str:
    return nodes[1]


@pytest.fixture(scope="module")
def browser(tmp_path_factory, pki):
    _, first, renewed, _ = pki
    camera = tmp_path_factory.mktemp("camera") / "grace.y4m"
    write_y4m(camera, moving_face_frames(grace_hopper(), 60, size=(640, 480)))
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), timeout=30_000, args=[
            *HEADLESS_FLAGS, "--use-fake-device-for-media-stream", f"--use-file-for-fake-video-capture={camera}",
            f"--ignore-certificate-errors-spki-list={first.spki_sha256},{renewed.spki_sha256}",
        ])
        try:
            yield browser
        finally:
            browser.close()


def _page(browser, url: str, init_script: str | None = None):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    if init_script:
        context.add_init_script(init_script)
    page = context.new_page()
    page.goto(f"{url}/#token={TOKEN}")
    page.wait_for_selector(".face[data-face-id]", timeout=30_000)
    return context, page


def _api(node: str, ca: Path, method: str, path: str):
    return http_json(method, f"{node}{path}", TOKEN, context=ssl.create_default_context(cafile=str(ca)))


def test_plain_http_from_another_machine_says_the_camera_needs_https(browser, http_node):
    context, page = _page(browser, http_node)
    try:
        assert page.evaluate("() => [window.isSecureContext, Boolean(navigator.mediaDevices)]") == [False, False]
        page.wait_for_selector("#message:not([hidden])", timeout=5_000)
        text = page.inner_text("#message-text")
        assert "secure origin" in text and "https://" in text and "--tls-cert" in text, text
        page.click("#start")  # pressing Start again says the same, and starts nothing
        assert "secure origin" in page.inner_text("#message-text")
        assert page.inner_text("#status-text") == "HTTPS needed"
        assert http_json("GET", f"{http_node}/api/v1/sessions", TOKEN) == (200, [])
    finally:
        context.close()


def test_https_camera_starts_and_the_swap_plays_through_turn(browser, https_node, pki, turn, address,
                                                             identity_of, astronaut_image, grace_image):
    ca = pki[0]
    status, faces = _api(https_node, ca.path, "GET", "/api/v1/faces")
    assert status == 200, faces
    astronaut = next(f["id"] for f in faces if "astronaut" in (f["id"] + f["name"]).lower())
    context, page = _page(browser, https_node, RELAY_ONLY_JS)
    try:
        assert page.evaluate("() => window.isSecureContext") is True
        page.click(f'.face[data-face-id="{astronaut}"]')
        started = time.time()
        page.click("#start")
        page.wait_for_function(REMOTE_PLAYING_JS, timeout=40_000)

        # the session came with time-limited TURN credentials, not the shared secret
        servers = page.evaluate("() => window.swapcast.live.sessionIceServers")
        (relay,) = [s for s in servers if s["urls"] == [turn.url]]
        expiry, user = relay["username"].split(":")
        assert user == USER and started + TURN_TTL_S - 5 <= int(expiry) <= time.time() + TURN_TTL_S + 1
        assert relay["credential"] and TURN_SECRET not in str(servers)
        # a re-offer reads the session again and gets credentials minted then
        again = page.evaluate("async () => (await window.swapcast.client.getSession(window.swapcast.live.sessionId)).ice_servers")
        assert [s["urls"] for s in again] == [s["urls"] for s in servers] and again[0]["username"].endswith(f":{USER}")

        # media flows on a relay candidate (the only TURN server here relays from 127.0.0.1) to
        # the node's host address
        pair = page.evaluate(SELECTED_PAIR_JS)
        assert pair and pair["local"] == "relay" and pair["local_address"] == "127.0.0.1", pair
        assert pair["remote_address"] == address and pair["bytes_received"] > 0, pair

        time.sleep(1.0)  # past the first keyframes and the tracker's warm-up
        frames = grab_frames(page, 5)
        votes, _, distances = identity_votes(frames, identity_of, identity_of(astronaut_image), identity_of(grace_image))
        assert votes > len(frames) // 2, f"the swapped frames should look like the astronaut: {distances}"
    finally:
        context.close()
    assert wait_for(lambda: _api(https_node, ca.path, "GET", "/api/v1/sessions") == (200, []), 10)


def test_the_dashboard_preview_plays_through_turn(browser, https_node, pki, turn, address):
    ca = pki[0]
    context, page = _page(browser, https_node, RELAY_ONLY_JS)
    operator = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        page.click("#start")
        page.wait_for_function(REMOTE_PLAYING_JS, timeout=40_000)
        session_id = page.evaluate("() => window.swapcast.live.sessionId")

        operator.set_default_timeout(20_000)
        operator.add_init_script(RELAY_ONLY_JS)
        dashboard = operator.new_page()
        dashboard.goto(f"{https_node}/admin/#token={ADMIN_TOKEN}")
        dashboard.click(f'tr[data-session-id="{session_id}"] button[data-action="preview"]')
        dashboard.wait_for_function(PREVIEW_PLAYING_JS, timeout=30_000)

        servers = dashboard.evaluate("() => window.swapcastAdmin.state.preview.pc.getConfiguration().iceServers")
        (relay,) = [s for s in servers if turn.url in s["urls"]]
        assert relay["username"].endswith(":operator") and TURN_SECRET not in str(servers)
        pair = dashboard.evaluate(selected_pair_js("window.swapcastAdmin.state.preview.pc"))
        assert pair and pair["local"] == "relay" and pair["local_address"] == "127.0.0.1", pair
        assert pair["remote_address"] == address and pair["bytes_received"] > 0, pair
    finally:
        operator.close()
        context.close()
    assert wait_for(lambda: _api(https_node, ca.path, "GET", "/api/v1/sessions") == (200, []), 10)


def test_certificate_reload_under_a_live_session_keeps_it_running(browser, https_node, pki, address):
    ca, first, renewed, live = pki
    context, page = _page(browser, https_node)
    try:
        page.click("#start")
        page.wait_for_function(REMOTE_PLAYING_JS, timeout=40_000)
        (session,) = _api(https_node, ca.path, "GET", "/api/v1/sessions")[1]
        port = int(https_node.rsplit(":", 1)[1])
        assert peer_certificate_serial(address, port, ca.path) == first.serial

        replace_files(renewed, live)
        https_node.process.send_signal(signal.SIGHUP)
        assert wait_for(lambda: peer_certificate_serial(address, port, ca.path) == renewed.serial, 10)

        before = page.evaluate(FRAMES_DECODED_JS)
        assert wait_for(lambda: page.evaluate(FRAMES_DECODED_JS) >= before + 10, 10), (before, page.evaluate(FRAMES_DECODED_JS))
        assert page.evaluate("() => window.swapcast.live.pc.connectionState") == "connected"
        assert page.evaluate("() => window.swapcast.live.reconnects") == 0
        status, again = _api(https_node, ca.path, "GET", f"/api/v1/sessions/{session['id']}")
        assert status == 200 and again["id"] == session["id"], again
        # the page's own API calls go on too, on new handshakes with the renewed certificate
        assert page.evaluate("async (token) => (await fetch('/api/v1/sessions', {headers: {Authorization: "
                             "`Bearer ${token}`}})).status", TOKEN) == 200
        assert "certificate reloaded" in https_node.log_path.read_text(errors="replace")
    finally:
        context.close()
