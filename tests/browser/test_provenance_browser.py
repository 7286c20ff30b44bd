"""The watermark in what a browser receives: Chromium (fake camera) runs the page against a
real ``swapcast serve`` node with default settings; frames grabbed from the page's swapped
<video> carry the session's payload under the public key."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import pytest
from browser_harness import REMOTE_PLAYING_JS, grab_frames, http_json, serve_node, write_y4m

from gpu.watermark.detect import Detector
from signaling.auth import mint_token
from streamer.provenance.marker import ProvenanceSettings
from streamer.provenance.payload import Payload, stream_hash
from streamer.samples import grace_hopper, moving_face_frames
from swapcast.benchmarks.chromium import HEADLESS_FLAGS, chromium_path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SECRET = "swapcast-provenance-browser-" + "p" * 32
TOKEN = mint_token(SECRET, "page-user")


def test_the_browsers_received_video_carries_the_sessions_mark(tmp_path):
    chromium = chromium_path()
    if not Path(chromium).exists():
        pytest.skip(f"Chromium not found at {chromium} (apt-get install chromium, or set SWAPCAST_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    camera = tmp_path / "grace.y4m"
    write_y4m(camera, moving_face_frames(grace_hopper(), 90, size=(640, 480)))
    (tmp_path / "node").mkdir()
    # at the 500 kbps floor a loaded machine's congestion control can sink to, x264 ultrafast
    # keeps too little of the mark (README "Provenance", limits)
    with serve_node(tmp_path / "node", SECRET, SWAPCAST_WEBRTC__MIN_BITRATE_KBPS="1200") as server, \
            sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, timeout=30_000,
            args=[*HEADLESS_FLAGS, "--use-fake-device-for-media-stream", f"--use-file-for-fake-video-capture={camera}"])
        try:
            page = browser.new_context().new_page()
            page.goto(f"{server}/#token={TOKEN}")
            page.wait_for_selector(".face[data-face-id]", timeout=30_000)
            page.click('.face[data-face-id*="astronaut"]')
            page.click("#start")
            page.wait_for_function(REMOTE_PLAYING_JS, timeout=30_000)
            time.sleep(2.0)  # past the first keyframes and the bitrate ramp
            frames = grab_frames(page, 40, spacing_s=0.05)
            status, sessions = http_json("GET", f"{server}/api/v1/sessions", TOKEN)
            assert status == 200 and len(sessions) == 1, sessions
        finally:
            browser.close()

    detector = Detector(ProvenanceSettings().watermark_key)
    for frame in frames:
        detector.add(cv2.cvtColor(frame, cv2.COLOR_RGB2YUV)[..., 0])
    found = detector.result()
    assert found.found, f"sync z {found.sync_z:.1f}, agreement {found.chip_agreement:.2f} over {found.frames} frames"
    assert Payload.from_bits(found.message).stream == stream_hash(sessions[0]["id"])
