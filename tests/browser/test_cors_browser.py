"""A player embedded in another site: Chromium opens a page served from another loopback origin
(a static server on its own port), which publishes over WHIP to a ``swapcast serve`` node with
fetch() and reads the answer's ``Location`` and ``Link`` headers, then ends the session with
DELETE. The node lists that origin in ``server.cors_origins``; the same page from an origin it
does not list (``localhost`` instead of ``127.0.0.1``) is refused by the browser.

Needs Debian's ``chromium`` (scripts/bootstrap installs it).
"""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from browser_harness import http_json, serve_node
from process_harness import free_tcp_port

from signaling.auth import mint_token
from swapcast.benchmarks.chromium import HEADLESS_FLAGS, chromium_path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

SECRET = "swapcast-cors-tests-" + "c" * 32
STUN = "stun:stun.example.org:3478"

# What an embedded WHIP publisher does: an offer, POST /whip with the stream key, the resource
# URL and the ICE servers from the answer's headers, then DELETE the resource.
PUBLISH_JS = """async ([node, key]) => {
  const pc = new RTCPeerConnection();
  pc.addTransceiver('video', {direction: 'sendonly'});
  await pc.setLocalDescription(await pc.createOffer());
  try {
    const auth = {Authorization: `Bearer ${key}`};
    const answer = await fetch(`${node}/whip`, {method: 'POST', body: pc.localDescription.sdp,
                                                 headers: {...auth, 'Content-Type': 'application/sdp'}});
    const location = answer.headers.get('Location');
    const result = {status: answer.status, location, link: answer.headers.get('Link'),
                    sdp: (await answer.text()).startsWith('v=0')};
    result.deleted = (await fetch(new URL(location, node), {method: 'DELETE', headers: auth})).status;
    return result;
  } catch (error) {
    return {error: String(error)};
  } finally {
    pc.close();
  }
}"""


@pytest.fixture(scope="module")
def page_server(tmp_path_factory):
    """A site of its own: one blank page, on a port the node does not serve."""
    root = tmp_path_factory.mktemp("site")
    (root / "index.html").write_text("<!doctype html><title>embedding app</title>")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", free_tcp_port()), handler)
    thread = threading.Thread(target=server.serve_forever, name="cors-test-site", daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_page_on_another_origin_publishes_over_whip_and_reads_location(tmp_path, page_server):
    allowed = f"http://127.0.0.1:{page_server}"
    with serve_node(tmp_path, SECRET, SWAPCAST_SERVER__CORS_ORIGINS=f'["{allowed}"]',
                    SWAPCAST_WEBRTC__ICE_SERVERS=f'[{{"urls": ["{STUN}"]}}]') as node:
        status, created = http_json("POST", f"{node}/api/v1/keys", mint_token(SECRET, "alice"),
                                    b'{"name": "embedded", "face_id": "astronaut"}', "application/json")
        assert status == 201, created
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), timeout=30_000, args=HEADLESS_FLAGS)
            try:
                page = browser.new_page()
                page.goto(f"{allowed}/")
                published = page.evaluate(PUBLISH_JS, [node, created["key"]])
                page.goto(f"http://localhost:{page_server}/")  # the same site, an origin the node does not list
                refused = page.evaluate(PUBLISH_JS, [node, created["key"]])
            finally:
                browser.close()
    assert published == {"status": 201, "location": published["location"], "link": f'<{STUN}>; rel="ice-server"',
                          "sdp": True, "deleted": 204}, published
    assert published["location"].startswith("/whip/")
    assert "Failed to fetch" in refused.get("error", ""), refused
    log = node.log_path.read_text()
    assert '"OPTIONS /whip HTTP/1.1" 204' in log and '"OPTIONS /whip HTTP/1.1" 403' in log
    assert log.count('"POST /whip HTTP') == 1  # the refused page's pre-flight failed: it never sent its POST
