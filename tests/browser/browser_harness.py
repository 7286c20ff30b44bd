"""What the browser tests share: a ``swapcast serve`` node (started and stopped by
process_harness), a fake-camera file for Chromium, grabbing frames from a page's <video>,
and scoring them by identity."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import cv2
import numpy as np
from process_harness import free_tcp_port, http_ok, running

# Draw the current frame of a <video> into a canvas and return it as a PNG data URL.
GRAB_FRAME_JS = """async (id) => {
  const video = document.getElementById(id);
  if ('requestVideoFrameCallback' in video) {
    await Promise.race([
      new Promise((resolve) => video.requestVideoFrameCallback(() => resolve())),
      new Promise((resolve) => setTimeout(resolve, 1000)),
    ]);
  }
  const canvas = document.createElement('canvas');
  canvas.width = video.videoWidth;
  canvas.height = video.videoHeight;
  canvas.getContext('2d').drawImage(video, 0, 0);
  return canvas.toDataURL('image/png');
}"""

REMOTE_PLAYING_JS = """() => {
  const v = document.getElementById('remote-video');
  return v.readyState >= 2 && v.currentTime > 0.3 && v.videoWidth > 0;
}"""

# Every <img> that has a source: has it loaded? (A broken image is complete with no width.)
PICTURES_JS = """() => [...document.images].filter((img) => img.getAttribute('src'))
  .map((img) => ({src: img.getAttribute('src'), complete: img.complete, loaded: img.complete && img.naturalWidth > 0}))"""


def pictures(page) -> list[dict]:
    """The page's pictures once every one of them finished loading (or failed to)."""
    page.wait_for_function(f"() => ({PICTURES_JS})().every((p) => p.complete)", timeout=10_000)
    return page.evaluate(PICTURES_JS)


def write_y4m(path: Path, frames: list[np.ndarray], fps: int = 30) -> None:
    """RGB frames -> YUV4MPEG2 (I420), the format Chromium's fake camera reads."""
    height, width = frames[0].shape[:2]
    with open(path, "wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for frame in frames:
            out.write(b"FRAME\n")
            out.write(cv2.cvtColor(frame, cv2.COLOR_RGB2YUV_I420).tobytes())


def decode_data_url(data_url: str) -> np.ndarray:
    assert data_url.startswith("data:image/png;base64,"), data_url[:40]
    raw = np.frombuffer(base64.b64decode(data_url.split(",", 1)[1]), np.uint8)
    bgr = cv2.imdecode(raw, cv2.IMREAD_COLOR)
    assert bgr is not None and bgr.size, "the grabbed frame did not decode"
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def grab_frames(page, count: int, spacing_s: float = 0.25, video_id: str = "remote-video") -> list[np.ndarray]:
    frames = []
    for _ in range(count):
        frames.append(decode_data_url(page.evaluate(GRAB_FRAME_JS, video_id)))
        time.sleep(spacing_s)
    return frames


def identity_votes(frames, identity_of, astronaut_id, grace_id) -> tuple[int, int, list]:
    """(frames closer to the astronaut, frames closer to Grace, distances)."""
    to_astronaut = to_grace = 0
    distances = []
    for frame in frames:
        try:
            identity = identity_of(frame)
        except AssertionError:  # no face found in this frame
            distances.append(None)
            continue
        d_astronaut = float(np.linalg.norm(identity - astronaut_id))
        d_grace = float(np.linalg.norm(identity - grace_id))
        distances.append((round(d_astronaut, 3), round(d_grace, 3)))
        to_astronaut += d_astronaut < d_grace
        to_grace += d_grace < d_astronaut
    return to_astronaut, to_grace, distances


class NodeURL(str):
    """A node's base URL; ``log_path`` is its stdout+stderr (aiohttp access log included),
    ``secret`` the HS256 secret its tokens are signed with, ``process`` the server's."""

    log_path: Path
    secret: str
    process: subprocess.Popen


@contextlib.contextmanager
def serve_node(data_dir: Path, secret: str, timeout_s: float = 60.0, *, host: str = "127.0.0.1",
               args: tuple[str, ...] = (), ca_file: Path | None = None, **env: str):
    """``swapcast serve`` on a free port of ``host`` (loopback by default) with JWT auth, until
    the block ends; with ``ca_file`` it serves HTTPS (``args`` name the certificate) and is
    checked against that CA."""
    port = free_tcp_port(host)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SWAPCAST_")}
    environ.update(SWAPCAST_AUTH__JWT_SECRET=secret, SWAPCAST_WEBRTC__HOST_ADDRESSES='["127.0.0.1"]',
                   SWAPCAST_SERVER__DATA_DIR=str(data_dir), SWAPCAST_RTMP__PORT="0")
    environ.update(env)
    command = [sys.executable, "-m", "swapcast.cli", "serve", "--host", host, "--port", str(port), "--rtmp-port", "0", *args]
    base_url = NodeURL(f"{'https' if ca_file else 'http'}://{host}:{port}")
    tls = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    with running("swapcast serve", command, data_dir / "server.log", http_ok(f"{base_url}/healthz", context=tls),
                 timeout_s=timeout_s, env=environ) as managed:
        base_url.log_path, base_url.secret, base_url.process = managed.log_path, secret, managed.process
        yield base_url


def http_json(method: str, url: str, token: str | None = None, body: bytes | None = None,
              content_type: str | None = None, timeout: float = 10, context: ssl.SSLContext | None = None):
    """(status, parsed JSON or text or None) without raising on 4xx/5xx; ``context`` for https://."""
    request = urllib.request.Request(url, data=body, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def screenshot(page, tmp_path: Path, name: str) -> Path:
    """A full-page screenshot in the test's tmp_path and, when ``SWAPCAST_SCREENSHOTS``
    names a directory (docs/screenshots/), there too."""
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    extra = os.environ.get("SWAPCAST_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / name)
    return path


def wait_for(predicate, timeout_s: float, interval_s: float = 0.25):
    """Poll ``predicate()`` until it is truthy or ``timeout_s`` passed; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval_s)
