"""Side-by-side pictures the tests make for the docs: written into the test's tmp_path and,
with ``SWAPCAST_SCREENSHOTS=DIR`` (``docs/screenshots/``), there too."""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np

HEIGHT = 300  # pixels: each panel is scaled to this height


def save_sheet(name: str, panels: list[tuple[str, np.ndarray]], tmp_path: Path) -> Path:
    """RGB panels side by side, each captioned below."""
    captioned = []
    for caption, picture in panels:
        width = round(picture.shape[1] * HEIGHT / picture.shape[0])
        scaled = cv2.resize(picture, (width, HEIGHT), interpolation=cv2.INTER_AREA)
        bar = np.full((28, width, 3), 255, np.uint8)
        cv2.putText(bar, caption, (6, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (20, 20, 20), 1, cv2.LINE_AA)
        captioned.append(np.vstack([scaled, bar]))
    sheet = cv2.cvtColor(np.hstack(captioned), cv2.COLOR_RGB2BGR)
    path = tmp_path / name
    cv2.imwrite(str(path), sheet)
    extra = os.environ.get("SWAPCAST_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(Path(extra) / name), sheet)
    return path
