"""Headless Debian Chromium as the glass-to-glass benchmark and the browser tests drive it
(Playwright's own browser download is never used)."""

from __future__ import annotations

import os
import shutil

# Headless, no sandbox (root in containers), no network chatter of its own, fake camera UI,
# and WebRTC allowed over loopback.
HEADLESS_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--use-fake-ui-for-media-stream",
    "--allow-loopback-in-peer-connection",
]


def chromium_path(explicit: str | None = None) -> str:
    """``explicit``, else ``SWAPCAST_CHROMIUM``, else chromium on PATH, else Debian's path."""
    return explicit or os.environ.get("SWAPCAST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
