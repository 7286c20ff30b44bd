"""Glass-to-glass latency through real Chromium: camera frame painted → swapped frame shown.

The page under test (the node's own ``/``) gets a canvas in place of the camera:
``navigator.mediaDevices.getUserMedia`` is replaced (before any page script runs) by
``canvas.captureStream(30)`` of a 640x480 canvas that, on every animation frame, paints a
face (Grace Hopper, drifting a little so the tracker and encoder see motion) and, in the
top-left corner, ``performance.now()`` in whole milliseconds as a barcode: 20 bits in
24x24 px black/white blocks (one row), then the same bits inverted (a second row) so a
block that compression smeared is caught instead of misread. The page then does what a user
does: picks the first source face, presses Start. On the remote (swapped) ``<video>``,
``requestVideoFrameCallback`` reads the barcode back from each displayed frame; glass-to-glass
latency = the frame's ``expectedDisplayTime`` − the painted timestamp (same page, same clock).

What it includes: canvas capture, Chromium's encoder and pacer, loopback network, the node's
decode → swap → encode, Chromium's jitter buffer, decoder and compositor. What it does not: a
real camera's exposure and USB transfer, or a real display's scan-out.

    from swapcast.benchmarks.glass import run_glass_benchmark
    report = run_glass_benchmark("http://127.0.0.1:8080", seconds=10)
    report["p50_ms"], report["p99_ms"]
"""

from __future__ import annotations

import base64
import os
import time
from typing import Any

import cv2
import numpy as np

from swapcast.benchmarks.chromium import HEADLESS_FLAGS, chromium_path

BITS = 20  # timestamps modulo 2**20 ms (~17 min); latencies are far below that
BLOCK = 24  # px; a multiple of 8 so blocks line up with the codec's transform blocks
WIDTH, HEIGHT, FPS = 640, 480, 30

CHROMIUM_FLAGS = [
    *HEADLESS_FLAGS,
    "--autoplay-policy=no-user-gesture-required",
    # keep timers and rAF running at full rate in a headless, never-focused page
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]

# Runs before the page's own scripts: getUserMedia -> a canvas that paints time as a barcode.
_CANVAS_CAMERA_JS = """
(() => {
  const BITS = %(bits)d, BLOCK = %(block)d, W = %(width)d, H = %(height)d, FPS = %(fps)d;
  const face = new Image();
  const faceReady = new Promise((resolve) => { face.onload = resolve; face.onerror = resolve; });
  face.src = %(face_url)r;
  let stream = null;
  function paint(canvas, ctx) {
    const t = performance.now();
    const phase = t / 1000;
    ctx.fillStyle = 'rgb(92,110,120)';
    ctx.fillRect(0, 0, W, H);
    if (face.naturalWidth) {
      const scale = Math.min(W / face.naturalWidth, (H - 2 * BLOCK - 16) / face.naturalHeight) * 0.92;
      const w = face.naturalWidth * scale, h = face.naturalHeight * scale;
      const x = (W - w) / 2 + 14 * Math.sin(phase), y = 2 * BLOCK + 10 + (H - 2 * BLOCK - 10 - h) / 2 + 6 * Math.cos(phase);
      ctx.drawImage(face, x, y, w, h);
    }
    const value = Math.floor(t) %% (1 << BITS);
    for (let i = 0; i < BITS; i++) {
      const bit = (value >> (BITS - 1 - i)) & 1;
      ctx.fillStyle = bit ? '#fff' : '#000';
      ctx.fillRect(i * BLOCK, 0, BLOCK, BLOCK);
      ctx.fillStyle = bit ? '#000' : '#fff';
      ctx.fillRect(i * BLOCK, BLOCK, BLOCK, BLOCK);
    }
  }
  async function canvasCamera() {
    if (stream) return stream.clone();
    await faceReady;
    const canvas = document.createElement('canvas');
    canvas.width = W; canvas.height = H;
    const ctx = canvas.getContext('2d');
    const loop = () => { paint(canvas, ctx); requestAnimationFrame(loop); };
    loop();
    stream = canvas.captureStream(FPS);
    return stream.clone();
  }
  const md = navigator.mediaDevices || {};
  Object.defineProperty(md, 'getUserMedia', { configurable: true, value: () => canvasCamera() });
  if (!navigator.mediaDevices) Object.defineProperty(navigator, 'mediaDevices', { value: md });
})();
"""

# Collect glass-to-glass samples from the remote video for `ms` milliseconds.
_COLLECT_JS = """
async ([ms, bits, block]) => {
  const video = document.getElementById('remote-video');
  const canvas = document.createElement('canvas');
  canvas.width = bits * block; canvas.height = 2 * block;
  const ctx = canvas.getContext('2d', { willReadFrequently: true });
  const samples = [], upstream = [], downstream = [], decode = [];
  let frames = 0, unreadable = 0;
  const mod = 1 << bits;
  const luma = (data, x, y) => {
    // mean over the block's inner half: robust to ringing at block edges
    let sum = 0, n = 0;
    for (let yy = y + block / 4; yy < y + (3 * block) / 4; yy += 2) {
      for (let xx = x + block / 4; xx < x + (3 * block) / 4; xx += 2) {
        const i = (yy * canvas.width + xx) * 4;
        sum += 0.299 * data[i] + 0.587 * data[i + 1] + 0.114 * data[i + 2];
        n++;
      }
    }
    return sum / n;
  };
  const scaleX = () => video.videoWidth / %(width)d, scaleY = () => video.videoHeight / %(height)d;
  await new Promise((resolve) => {
    const end = performance.now() + ms;
    const onFrame = (now, meta) => {
      frames++;
      ctx.drawImage(video, 0, 0, canvas.width * scaleX(), canvas.height * scaleY(), 0, 0, canvas.width, canvas.height);
      const data = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
      let value = 0, ok = true;
      for (let i = 0; i < bits; i++) {
        const top = luma(data, i * block, 0), bottom = luma(data, i * block, block);
        if (Math.abs(top - bottom) < 60) { ok = false; break; }
        value = (value << 1) | (top > bottom ? 1 : 0);
      }
      const shown = meta.expectedDisplayTime || now;
      // a modular difference past half the range is a time before the barcode was painted
      // (seen once: -1 ms read as 2**20 - 1, a p99 of 262 s): no latency, an unreadable frame
      const total = ok ? ((Math.floor(shown) - value) %% mod + mod) %% mod : 0;
      if (ok && total < mod / 2) {
        samples.push(total);
        if (meta.receiveTime) {  // the frame's last packet in: painted -> received, received -> shown
          const received = ((Math.floor(meta.receiveTime) - value) %% mod + mod) %% mod;
          if (received < mod / 2) upstream.push(received);
          downstream.push(shown - meta.receiveTime);
        }
        if (meta.processingDuration !== undefined) decode.push(1000 * meta.processingDuration);
      } else {
        unreadable++;
      }
      if (performance.now() < end) video.requestVideoFrameCallback(onFrame);
      else resolve();
    };
    video.requestVideoFrameCallback(onFrame);
    setTimeout(resolve, ms + 2000);
  });
  return { samples, frames, unreadable, upstream, downstream, decode };
}
"""

# Cumulative WebRTC counters of the page's peer connection (video), for per-frame averages
# over the measured window (the difference of two snapshots).
_RTP_COUNTERS_JS = """
async () => {
  const live = window.swapcast.live;
  if (!live || !live.pc) return {};
  const out = {};
  (await live.pc.getStats()).forEach((s) => {
    if (s.kind !== 'video') return;
    if (s.type === 'outbound-rtp') {
      out.framesEncoded = s.framesEncoded; out.totalEncodeTime = s.totalEncodeTime;
      out.packetsSent = s.packetsSent; out.totalPacketSendDelay = s.totalPacketSendDelay;
      out.encoderImplementation = s.encoderImplementation;
    } else if (s.type === 'inbound-rtp') {
      out.jitterBufferDelay = s.jitterBufferDelay; out.jitterBufferTargetDelay = s.jitterBufferTargetDelay;
      out.jitterBufferMinimumDelay = s.jitterBufferMinimumDelay; out.jitterBufferEmittedCount = s.jitterBufferEmittedCount;
      out.framesDecoded = s.framesDecoded; out.totalDecodeTime = s.totalDecodeTime;
      out.totalProcessingDelay = s.totalProcessingDelay; out.totalAssemblyTime = s.totalAssemblyTime;
      out.framesAssembledFromMultiplePackets = s.framesAssembledFromMultiplePackets;
      out.decoderImplementation = s.decoderImplementation;
    }
  });
  return out;
}
"""


def _face_data_url() -> str:
    from streamer.samples import grace_hopper

    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(grace_hopper(), cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])
    if not ok:
        raise RuntimeError("could not encode the sample face")
    return "data:image/jpeg;base64," + base64.b64encode(jpeg.tobytes()).decode("ascii")


def _chromium_path(explicit: str | None) -> str:
    path = chromium_path(explicit)
    if not os.path.exists(path):
        raise FileNotFoundError(f"Chromium not found at {path} (apt-get install chromium, or set SWAPCAST_CHROMIUM)")
    return path


def run_glass_benchmark(
    base_url: str,
    seconds: float = 10.0,
    *,
    face_id: str | None = None,
    warmup_s: float = 2.0,
    chromium: str | None = None,
    start_timeout_s: float = 30.0,
    browser=None,
    token: str | None = None,
) -> dict[str, Any]:
    """Glass-to-glass latency of one live WebRTC swap on the node at ``base_url``.

    Opens the node's page in headless Chromium with a canvas camera, starts a session with
    ``face_id`` (default: the first face the page lists), discards ``warmup_s``, measures for
    ``seconds``, stops the session. Returns p50/p99/mean/min/max in ms, the sample count,
    frames shown and unreadable, the resolution sent and shown, and the server's own
    latency numbers for the same session. ``token``: the API token the page signs in with.
    ``browser``: an already launched Playwright
    (sync) Chromium to open the page in (it needs ``--use-fake-ui-for-media-stream``);
    by default one is launched and closed here."""
    from playwright.sync_api import sync_playwright

    base_url = base_url.rstrip("/") + "/" + (f"#token={token}" if token else "")
    init_script = _CANVAS_CAMERA_JS % {
        "bits": BITS, "block": BLOCK, "width": WIDTH, "height": HEIGHT, "fps": FPS, "face_url": _face_data_url(),
    }
    collect_js = _COLLECT_JS % {"width": WIDTH, "height": HEIGHT}
    if browser is not None:
        result, rtp, server = _measure(browser, base_url, init_script, collect_js, seconds, face_id, warmup_s, start_timeout_s)
    else:
        with sync_playwright() as playwright:
            own = playwright.chromium.launch(executable_path=_chromium_path(chromium), args=CHROMIUM_FLAGS, timeout=30_000)
            try:
                result, rtp, server = _measure(own, base_url, init_script, collect_js, seconds, face_id, warmup_s, start_timeout_s)
            finally:
                own.close()

    samples = np.array(result["samples"], dtype=float)
    report: dict[str, Any] = {
        "seconds": seconds,
        "samples": int(samples.size),
        "frames_shown": int(result["frames"]),
        "frames_unreadable": int(result["unreadable"]),
        "p50_ms": float(np.percentile(samples, 50)) if samples.size else None,
        "p99_ms": float(np.percentile(samples, 99)) if samples.size else None,
        "mean_ms": float(samples.mean()) if samples.size else None,
        "min_ms": float(samples.min()) if samples.size else None,
        "max_ms": float(samples.max()) if samples.size else None,
        "breakdown": where_the_time_goes(result, server),
        "sent": (rtp or {}).get("sent"),
        "received": (rtp or {}).get("received"),
        "server": {
            k: server.get(k)
            for k in ("latency_p50_ms", "latency_p99_ms", "swap_ms", "fps_in", "fps_out", "frames_in", "frames_dropped", "faces_seen", "faces_swapped")
        },
    }
    return report


def _per(after: dict[str, Any], before: dict[str, Any], total: str, count: str, scale: float = 1000.0) -> float | None:
    """Per-item average of a cumulative counter over the window, in ms (None when unknown)."""
    if after.get(total) is None or before.get(total) is None or not after.get(count) or before.get(count) is None:
        return None
    items = after[count] - before[count]
    return scale * (after[total] - before[total]) / items if items > 0 else None


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def where_the_time_goes(result: dict[str, Any], server: dict[str, Any]) -> dict[str, Any]:
    """Glass to glass split by where it passes (p50s of the frames, averages of the browser's
    own counters): painted -> the swapped frame's last packet received by the page
    (``upstream``: canvas capture, the browser's encoder and pacer, the network, the node:
    its jitter buffer, decode, swap, encode) and received -> shown (``downstream``: the
    page's jitter buffer, decoder and renderer)."""
    before, after = result.get("counters") or ({}, {})
    upstream, downstream = _median(result.get("upstream") or []), _median(result.get("downstream") or [])
    parts = {
        "upstream_p50_ms": upstream,
        "browser_encode_ms": _per(after, before, "totalEncodeTime", "framesEncoded"),
        "browser_pacer_ms": _per(after, before, "totalPacketSendDelay", "packetsSent"),
        "server_swap_ms": server.get("latency_p50_ms"),  # decoded frame in -> swapped frame out
        "downstream_p50_ms": downstream,
        "page_jitter_buffer_ms": _per(after, before, "jitterBufferDelay", "jitterBufferEmittedCount"),
        "page_jitter_buffer_target_ms": _per(after, before, "jitterBufferTargetDelay", "jitterBufferEmittedCount"),
        "page_jitter_buffer_minimum_ms": _per(after, before, "jitterBufferMinimumDelay", "jitterBufferEmittedCount"),
        "page_decode_ms": _median(result.get("decode") or []) or _per(after, before, "totalDecodeTime", "framesDecoded"),
        "page_processing_ms": _per(after, before, "totalProcessingDelay", "framesDecoded"),
        "encoder": after.get("encoderImplementation"),
        "decoder": after.get("decoderImplementation"),
    }
    known = [parts[k] for k in ("browser_encode_ms", "browser_pacer_ms", "server_swap_ms")]
    if upstream is not None and all(v is not None for v in known):
        # the canvas capture, two network hops (loopback: ~0) and the node's RTP/decode/encode
        parts["upstream_rest_ms"] = upstream - sum(known)
    return parts


def _measure(browser, base_url, init_script, collect_js, seconds, face_id, warmup_s, start_timeout_s):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        context.add_init_script(init_script)
        page = context.new_page()
        page.set_default_timeout(start_timeout_s * 1000)
        page.goto(base_url)
        page.wait_for_selector(".face[data-face-id]")
        page.click(f'.face[data-face-id="{face_id}"]' if face_id else ".face[data-face-id]")
        page.click("#start")
        page.wait_for_function(
            """() => { const v = document.getElementById('remote-video');
                       const m = document.getElementById('message');
                       return (v.readyState >= 2 && v.currentTime > 0.2) || (m && !m.hidden && m.dataset.kind === 'error'); }""",
        )
        if page.is_visible("#message") and page.get_attribute("#message", "data-kind") == "error":
            raise RuntimeError(f"the page could not start a session: {page.inner_text('#message')}")
        time.sleep(warmup_s)
        before = page.evaluate(_RTP_COUNTERS_JS)
        result = page.evaluate(collect_js, [int(seconds * 1000), BITS, BLOCK])
        result["counters"] = (before, page.evaluate(_RTP_COUNTERS_JS))
        rtp = page.evaluate("() => window.swapcast.live ? window.swapcast.live.rtpStats() : {}")
        session_id = page.evaluate("() => window.swapcast.live && window.swapcast.live.sessionId")
        server = {}
        if session_id:
            server = page.evaluate("async (id) => (await window.swapcast.client.getSession(id)).stats || {}", session_id)
        page.click("#stop")
        page.wait_for_function("() => !window.swapcast.live")
        return result, rtp, server
    finally:
        context.close()


if __name__ == "__main__":  # python -m swapcast.benchmarks.glass http://127.0.0.1:8080 10 [TOKEN]
    import json
    import sys

    url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
    duration = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    print(json.dumps(run_glass_benchmark(url, duration, token=sys.argv[3] if len(sys.argv) > 3 else None), indent=2))
