"""The source's eyes take the target's light, not the skin's colour match, per frame.

The re-lit face is the source's albedo times the target's light, scaled so that the
source's skin comes out as the target's skin. That scale is the ratio of the two skins, and
the eyes' whites are white in everyone: wherever the two skins differ in darkness the eyes
took a gain that is not theirs. A dark-skinned photo onto a light-skinned target scaled its
eyes by the skins' ratio (two to four times) and they glowed; a light-skinned photo onto a
dark-skinned target dimmed them to grey.

What light reaches the eyes, the target's own eyes tell: the lighter part of each open eye
(its white, ``WHITE_PERCENTILE``) is read in the target crop and in the re-lit face. Where
the face's whites are more than ``LEEWAY`` times lighter than the target's, or, as light as
the target's or lighter, further from their colour than ``CHROMA_LEEWAY`` (darker, their
lighter part is lids and shade, not white: taking the target's colour there cost a light
photo's likeness on a dark-skinned target), its eye openings take the excess away, and
their whites never come out lighter than ``WHITE_CEILING`` (or the target's own). How much
white an eye shows and how deep it lies in shade differ from person to person, so only the
excess is taken; darker whites are left (brightened, a photo's shaded eyes lit up their red
rims, and the likeness went: Grace Hopper onto the tune half's brown-skinned astronaut,
mean dlib distance to her 0.558 left, 0.633 brightened beyond twice). An eye that is shut,
hidden or too small to read is not read. A video track's eyes are read every few frames, its
gain smoothed over the readings and kept through readings where neither eye can be read (a
blink: the eyes neither flicker with the gaze nor flash back to the skin's gain for a frame);
a still with neither eye read is left as it was.

At registration (``eyes_in_range``) an eye opening whose white lies above the albedo's range
is scaled down whole rather than clipped channel by channel, which took its colour.
"""

from __future__ import annotations

import cv2
import numpy as np

from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR
from gpu.tracking.readings import ReadingsPerTrack

EYES = ((RIGHT_EYE_CONTOUR, 159, 145), (LEFT_EYE_CONTOUR, 386, 374))  # contour, upper and lower lid's middle
INNER = 0.75  # the opening is read inside its contour shrunk to this about its centre (no lashes, lid rims)
MIN_OPENING_PX = 3.0  # crop pixels: an eye opened less than this (either face) is not read ...
MIN_PIXELS = 12  # ... nor one with fewer pixels than this inside
WHITE_PERCENTILE = 75.0  # of an opening's lightness: its white (the sclera fills most of an open eye)
LEEWAY = 2.0  # the face's eye whites may be this many times lighter than the target's (how much white an eye
# shows, how deep it lies in shade, differ from person to person that much): only what is beyond is taken down
CHROMA_LEEWAY = 1.15  # ... and each channel this far from the target's whites' colour
WHITE_CEILING = 0.85  # nor may they come out lighter than this (or the target's own whites), per channel
GAIN_RANGE = (0.3, 1.5)
READ_EVERY = 3  # frames: how often a video track's eyes are read (a reading takes ~0.7 ms a face)
TRACK_SMOOTHING = 0.4  # of each reading a video track's gain takes (log; about half a second's memory)
EDGE_SIGMA = 0.75  # half-resolution pixels: the gain's fade across the opening's rim


def eye_gain(target_colour, face_colour, target: np.ndarray, face: np.ndarray) -> np.ndarray | None:
    """(3,) the gain that gives the face's eye whites the target's, or None where no
    eye can be read in both. ``target`` and ``face`` are the two meshes (468, 2+) in crop
    pixels; ``*_colour`` map (N, 2) crop points to (N, 3) colours (NaN: not seen there)."""
    whites = [pair for pair in zip(_whites(target_colour, target), _whites(face_colour, face), strict=True)
              if pair[0] is not None and pair[1] is not None]
    if not whites:
        return None
    target_log = np.mean([np.log(target_white) for target_white, _ in whites], axis=0)
    face_log = np.mean([np.log(face_white) for _, face_white in whites], axis=0)
    log_ratio = target_log - face_log
    light = float(log_ratio.mean())
    chroma = log_ratio - light
    if light > 0.0:  # whites darker than the target's are not read for colour: their lighter part is lids and shade
        chroma = np.zeros_like(chroma)
    light = min(light + np.log(LEEWAY), 0.0)  # only taken down: brightening a photo's shaded eyes lit their red rims
    chroma = np.sign(chroma) * np.maximum(np.abs(chroma) - np.log(CHROMA_LEEWAY), 0.0)
    chroma = chroma - chroma.mean()  # the colour's correction leaves the lightness alone
    gain = np.exp(light + chroma)
    ceiling = max(WHITE_CEILING, float(np.exp(target_log).max()))
    gain = gain * min(1.0, ceiling / float((np.exp(face_log) * gain).max()))
    return np.clip(gain, *GAIN_RANGE)


def eyes_in_range(albedo: np.ndarray, eyes: np.ndarray, seen: np.ndarray, ceiling: float) -> np.ndarray:
    """The per-texel albedo (P, 3), relative to the skin, with the eye openings (``eyes`` (P,)
    weights) scaled as a whole so that their white fits under ``ceiling``: the albedo's range
    ends there, and a dark-skinned photo's whites lie three to five times above its skin.
    Clipped channel by channel they lost their colour and came out the skin's, only lighter
    (peach glowing eyes); scaled whole they keep it and the iris keeps its contrast to them.
    ``seen`` (P,): how well each texel was seen (the whites are read where it is > 0.3)."""
    inside = (eyes > 0.5) & (seen > 0.3)
    if inside.sum() < MIN_PIXELS:
        return albedo
    brightest = albedo[inside].max(1)
    white = float(np.percentile(brightest, 100.0 - (100.0 - WHITE_PERCENTILE) / 2.0))
    if white <= ceiling:
        return albedo
    return albedo * (1.0 + eyes * (ceiling / white - 1.0))[:, None]


class EyeGainPerTrack(ReadingsPerTrack[np.ndarray]):
    """Each video track's eye gain, read every ``READ_EVERY`` frames, smoothed over its
    readings (in log) and kept while none can be read; a still (no track) takes its own reading."""

    def __init__(self, max_tracks: int = 64) -> None:
        super().__init__(READ_EVERY, lambda gain, reading: np.exp(np.log(gain) + TRACK_SMOOTHING * (np.log(reading) - np.log(gain))),
                         max_tracks)


def relight_eyes(shading: np.ndarray, gain: np.ndarray, face: np.ndarray, drawn: np.ndarray) -> None:
    """Multiply ``shading`` (H, W, 3, half resolution), in place, by ``gain`` inside the
    face's eye openings (``face``: its mesh in crop pixels; ``drawn`` (H, W) bool: the
    pixels the face covers), fading over their rims."""
    height, width = shading.shape[:2]
    corners = [face[list(contour), :2] * 0.5 - 0.25 for contour, _, _ in EYES]
    reach = int(np.ceil(3.0 * EDGE_SIGMA)) + 1
    x0, y0 = np.maximum(np.floor(np.min([c.min(0) for c in corners], 0)).astype(int) - reach, 0)
    x1, y1 = np.minimum(np.ceil(np.max([c.max(0) for c in corners], 0)).astype(int) + reach + 1, (width, height))
    if x1 <= x0 or y1 <= y0:
        return
    weight = np.zeros((y1 - y0, x1 - x0), np.float32)
    for corner in corners:
        cv2.fillPoly(weight, [np.round((corner - (x0, y0)) * 16).astype(np.int32)], 1.0, cv2.LINE_AA, shift=4)
    weight = cv2.GaussianBlur(weight, (0, 0), EDGE_SIGMA) * drawn[y0:y1, x0:x1]
    shading[y0:y1, x0:x1] *= 1.0 + weight[..., None] * (np.asarray(gain, np.float32) - 1.0)


def _whites(colour_at, mesh: np.ndarray) -> list[np.ndarray | None]:
    """Per eye, (3,) the colour of its white (the mean of the lightest part of the inside of
    its opening), None where it cannot be read; ``colour_at`` is asked once for both eyes."""
    openings = [_inside(mesh, contour, upper, lower) for contour, upper, lower in EYES]
    points = [p for p in openings if p is not None]
    if not points:
        return [None] * len(EYES)
    colours = iter(np.split(colour_at(np.concatenate(points)), np.cumsum([len(p) for p in points])[:-1]))
    whites = []
    for opening in openings:
        if opening is None:
            whites.append(None)
            continue
        seen = next(colours)
        seen = seen[np.isfinite(seen).all(1)]
        if len(seen) < MIN_PIXELS:
            whites.append(None)
            continue
        lightness = seen.mean(1)
        rank = int(len(lightness) * WHITE_PERCENTILE / 100.0)
        whites.append(np.maximum(seen[lightness >= np.partition(lightness, rank)[rank]].mean(0), 1e-3))
    return whites


def _inside(mesh: np.ndarray, contour: tuple[int, ...], upper: int, lower: int) -> np.ndarray | None:
    """(N, 2) float32 the crop pixels inside one eye's opening (its contour shrunk by
    ``INNER``), None where it is shut or too small."""
    if float(mesh[lower, 1] - mesh[upper, 1]) < MIN_OPENING_PX:
        return None
    corners = mesh[list(contour), :2]
    centre = corners.mean(0)
    inner = centre + (corners - centre) * INNER
    x0, y0 = np.floor(inner.min(0)).astype(int)
    x1, y1 = np.ceil(inner.max(0)).astype(int) + 1
    if x1 - x0 < 2 or y1 - y0 < 2:
        return None
    inside = np.zeros((y1 - y0, x1 - x0), np.uint8)
    cv2.fillPoly(inside, [np.round((inner - (x0, y0)) * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)
    rows, cols = np.nonzero(inside)
    if len(rows) < MIN_PIXELS:
        return None
    return np.stack([cols + x0, rows + y0], 1).astype(np.float32)
