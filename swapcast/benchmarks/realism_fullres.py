"""The realism bench's pictures at full resolution: one picture per case, the face at its
native size (never scaled down), source | target | each run side by side.

The contact sheets bring every face to a 200 px tile, which hides what makes a swap read as
a mask: a soft, plastic face without pores or lid creases, a mouth drawn as a band, the
target's glasses rims showing through. Here each tile is the image's own pixels around the
face (1.5 times its box); a face smaller than ``MIN_FACE`` pixels wide is enlarged by a
whole factor with nearest-neighbour pixels, so what is shown is still each pixel as it is.
Each tile carries a caption strip with the case's numbers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np

from streamer.media.images import write_image

if TYPE_CHECKING:
    from swapcast.benchmarks.realism import RealismResult
    from swapcast.benchmarks.realism_set import RealismClip, RealismSource, RealismTarget
    from swapcast.benchmarks.swap_worker import SwapOutputs

CONTEXT = 1.5  # the tile spans this many times the face box's larger side
MIN_FACE = 160  # px: a face narrower than this is enlarged by a whole factor (nearest neighbour)
CAPTION = 18  # px: the strip under each tile
GAP = 4  # px between tiles


def write_fullres(folder: Path, names: list[str], runs: dict[str, SwapOutputs], results: list[RealismResult],
                  sources: list[RealismSource], targets: list[RealismTarget], clips: list[RealismClip]) -> list[Path]:
    """One PNG per (source, target image or clip's middle frame): source | target | runs."""
    from swapcast.benchmarks.realism import CLIP_EVERY, _source_box

    folder.mkdir(parents=True, exist_ok=True)
    scores = {(r.swapper, r.source, r.target): r for r in results}
    paths = []
    for source in sources:
        source_tile = face_tile(source.image, _source_box(source.image), source.name)
        for target in targets:
            if target.person == source.person:
                continue
            index = int(np.argmax([f.width for f in target.faces]))
            key = target.name if len(target.faces) == 1 else f"{target.name}#{index}"
            box = target.faces[index].box
            tiles = [source_tile, face_tile(target.image, box, target.name)]
            for name in names:
                output = runs[name].stills.get((source.name, target.name))
                tiles.append(face_tile(output, box, caption(name, scores.get((name, source.name, key)))))
            paths.append(_save(folder, f"{source.name}__{target.name}", tiles))
        for clip in clips:
            if clip.person == source.person:
                continue
            middle = (len(clip.frames) // 2) // CLIP_EVERY * CLIP_EVERY
            box = clip.faces[middle].box
            key = f"{clip.name}#{middle}"
            tiles = [source_tile, face_tile(clip.frames[middle], box, key)]
            for name in names:
                frames = runs[name].clips.get((source.name, clip.name))
                tiles.append(face_tile(frames[middle] if frames else None, box, caption(name, scores.get((name, source.name, key)))))
            paths.append(_save(folder, f"{source.name}__{key}", tiles))
    return paths


def caption(name: str, result: RealismResult | None) -> str:
    if result is None:
        return f"{name}: none"

    def num(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    verdict = "pass" if result.passed else "FAIL"
    return (f"{name} {verdict} d{num(result.output_to_source)} detail{num(result.detail)} grain{num(result.grain)} "
            f"ghost{num(result.target_detail_left)} lips{num(result.lip_red, 1)}")


def face_tile(image: np.ndarray | None, box: np.ndarray, text: str) -> np.ndarray:
    """The image's own pixels around ``box`` (x0, y0, x1, y1), black past its edges (or all
    black without an image), enlarged by a whole factor only when the face is small, with a
    caption strip under it."""
    width = float(box[2] - box[0])
    factor = max(1, int(np.ceil(MIN_FACE / max(width, 1.0))))
    side = int(round(CONTEXT * max(width, float(box[3] - box[1]), 1.0)))
    centre = (np.asarray(box[:2], np.float64) + np.asarray(box[2:], np.float64)) / 2
    x0, y0 = int(round(centre[0] - side / 2)), int(round(centre[1] - side / 2))
    tile = np.zeros((side, side, 3), np.uint8)
    if image is not None:
        height, image_width = image.shape[:2]
        ax0, ay0 = max(x0, 0), max(y0, 0)
        ax1, ay1 = min(x0 + side, image_width), min(y0 + side, height)
        if ax1 > ax0 and ay1 > ay0:
            tile[ay0 - y0:ay1 - y0, ax0 - x0:ax1 - x0] = image[ay0:ay1, ax0:ax1]
    if factor > 1:
        tile = cv2.resize(tile, None, fx=factor, fy=factor, interpolation=cv2.INTER_NEAREST)
    strip = np.zeros((CAPTION, tile.shape[1], 3), np.uint8)
    label = text if factor == 1 else f"{text} (x{factor})"
    scale = min(0.4, 0.4 * tile.shape[1] / max(7.5 * len(label), 1.0))
    cv2.putText(strip, label, (3, CAPTION - 5), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 0), 1, cv2.LINE_AA)
    return np.vstack([tile, strip])


def _save(folder: Path, name: str, tiles: list[np.ndarray]) -> Path:
    height = max(tile.shape[0] for tile in tiles)
    padded = []
    for tile in tiles:
        canvas = np.zeros((height, tile.shape[1] + GAP, 3), np.uint8)
        canvas[: tile.shape[0], : tile.shape[1]] = tile
        padded.append(canvas)
    path = folder / f"{re.sub(r'[^A-Za-z0-9_.+-]+', '_', name)}.png"
    write_image(path, np.hstack(padded))
    return path
