"""What a downscaled contact sheet hides: how much of the source's fine detail the swapped
face keeps, and what the swap did to the mouth.

- **detail kept**: the skin's fine detail (pores, lid creases, the nose's edges: the
  log-lightness minus its Gaussian low pass of ``DETAIL_SIGMA`` pixels) in the output's
  face, over the same in the source's face, both brought to one face width first (the
  smaller of the two: neither is asked for detail its pixels cannot hold). Measured on
  the skin inside the outline with the eyes, brows and mouth left out (those are edges,
  not texture). 1 keeps all the source's detail; a waxy, plastic mask reads ~0.5 and less.
- **target detail left**: the same fine detail of the target at its own resolution, and how
  much of it is still in the output there (the slope of the output's on the target's): 0
  when the face is all the source's, 1 when the target's wrinkles, glasses rims and pores
  are all still there (a swap faded over a wide band shows the target through: a ghost).
  Detail kept alone would count that as detail;
- **grain**: how fine-grained the swapped skin is against the skin it replaced, both at the
  target's own resolution: the median absolute finest detail (log-lightness minus its
  Gaussian low pass of ``GRAIN_SIGMA`` pixels) on the output's face skin over the same on
  the target's (medians: a glasses rim or a deep fold does not count). 1: as grainy as the
  target's skin, neck and forehead; a smooth, waxy face reads ~0.5 and less (a mask);
- **shadow red**: how much redder the skin gets where it is darker, in its fine detail
  (finer than ``SHADOW_SIGMA`` of the face's width): minus the slope of the red
  log-chromaticity on the log-lightness over the skin, in the output and in the target.
  Real skin reads ~0.4-0.5 (light scattered under the skin); grey wrinkles drawn on a
  coloured face read ~0 (dirty, grey skin);
- **teeth on closed lips**: where the target's mouth is closed, the share of its lips'
  pixels that the output made teeth-like (much brighter than the skin and greyer) -- an
  open-mouthed source's teeth drawn onto closed lips;
- **lip red**: the lips' redness over the skin around them (CIE a*, lips minus skin): lips
  read as lips from ~4; a grey band reads ~0 or below;
- **mouth kept**: where the target's mouth is open, how far the output's mouth opening is
  from the target's own (mean CIE76): its teeth and tongue stay its own (0);
- **too sharp**: how much sharper the output face's strongest edges (its features) are than
  the target face's, in the target's pixels (the Gaussian sigma the output lacks, 0 when it
  is as soft or softer): a crisp photo on a webcam's soft face reads as a mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from gpu.analysis.landmarks import FACE_OVAL, INNER_LIPS, OUTER_LIPS
from gpu.kernels.softness import grey, softening, softness
from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR
from gpu.swappers.mesh3d_geometry import LEFT_BROW, RIGHT_BROW

DETAIL_SIGMA = 1.5  # pixels at the common face width: detail finer than this is what a mask loses first
GRAIN_SIGMA = 1.0  # pixels of the target's own frame: the finest detail, what a camera's grain and pores are
DETAIL_OUTLINE = 0.9  # the skin measured lies inside the outline scaled by this (the seam's band is the edge's business)
DETAIL_FEATURE_MARGIN = 0.06  # of the face's width: the eyes, brows and mouth grown by this
MIN_DETAIL_PIXELS = 64
SHADOW_SIGMA = 1 / 40  # of the face's width: the detail whose colour "shadow red" measures
CLOSED_MOUTH = 0.04  # gap between the inner lips over the mouth's width: below this a mouth is closed
TEETH_LIGHTER = 12.0  # CIE L* above the skin's median ...
TEETH_GREYER = 0.6  # ... and chroma below this share of the skin's: a pixel reads as teeth


@dataclass(frozen=True)
class MouthReport:
    """The mouth of one swapped face (see the module docstring); None where not measured."""

    teeth_on_closed_lips: float | None  # share of the lips' pixels (closed target mouths)
    lip_red: float | None  # CIE a*: lips minus the skin around them, in the output
    target_lip_red: float | None  # the same in the target
    mouth_kept: float | None  # CIE76 between output and target inside an open target mouth


def _polygon(mesh: np.ndarray, ids: tuple[int, ...], shape: tuple[int, int], grow: float = 1.0) -> np.ndarray:
    points = mesh[list(ids)].astype(np.float64)
    centre = points.mean(0)
    mask = np.zeros(shape, np.uint8)
    cv2.fillPoly(mask, [np.round((centre + (points - centre) * grow) * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)
    return mask.astype(bool)


def detail_skin(mesh: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """(H, W) bool: the skin whose detail is measured (inside the outline, no features)."""
    size = shape[:2]
    width = float(np.ptp(mesh[:, 0]))
    features = np.zeros(size, np.uint8)
    for contour in (LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, LEFT_BROW, RIGHT_BROW, OUTER_LIPS):
        hull = cv2.convexHull(np.round(mesh[list(contour)].astype(np.float64) * 16).astype(np.int32))
        cv2.fillConvexPoly(features, hull, 1, cv2.LINE_8, shift=4)
    margin = max(1, int(round(DETAIL_FEATURE_MARGIN * width)))
    features = cv2.dilate(features, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * margin + 1,) * 2))
    return _polygon(mesh, FACE_OVAL, size, DETAIL_OUTLINE) & (features == 0)


def face_detail(image: np.ndarray, mesh: np.ndarray, face_width: float) -> float | None:
    """RMS of the fine detail of the log-lightness on the face's skin, the face brought to
    ``face_width`` pixels wide; None when too little skin shows."""
    skin = detail_skin(mesh, image.shape)
    if skin.sum() < MIN_DETAIL_PIXELS:
        return None
    rows, cols = np.nonzero(skin)
    pad = int(4 * DETAIL_SIGMA * float(np.ptp(mesh[:, 0])) / max(face_width, 1.0)) + 2
    y0, y1 = max(0, rows.min() - pad), min(image.shape[0], rows.max() + pad + 1)
    x0, x1 = max(0, cols.min() - pad), min(image.shape[1], cols.max() + pad + 1)
    lightness = np.log(np.maximum(image[y0:y1, x0:x1].astype(np.float32).mean(2), 1.0))
    scale = face_width / float(np.ptp(mesh[:, 0]))
    size = (max(1, int(round((x1 - x0) * scale))), max(1, int(round((y1 - y0) * scale))))
    lightness = cv2.resize(lightness, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    inside = cv2.resize(skin[y0:y1, x0:x1].astype(np.float32), size, interpolation=cv2.INTER_AREA) > 0.99
    if inside.sum() < MIN_DETAIL_PIXELS:
        return None
    fine = lightness - cv2.GaussianBlur(lightness, (0, 0), DETAIL_SIGMA)
    return float(np.sqrt(np.mean(fine[inside] ** 2)))


def detail_kept(output: np.ndarray, output_mesh: np.ndarray, source: np.ndarray, source_mesh: np.ndarray) -> float | None:
    """The output face's fine detail over the source face's, at the smaller face's width."""
    width = min(float(np.ptp(output_mesh[:, 0])), float(np.ptp(source_mesh[:, 0])))
    swapped, own = face_detail(output, output_mesh, width), face_detail(source, source_mesh, width)
    if swapped is None or own is None or own <= 1e-6:
        return None
    return swapped / own


def target_detail_left(output: np.ndarray, target: np.ndarray, mesh: np.ndarray) -> float | None:
    """How much of the target's own fine detail the output face still shows (0: none, 1: all)."""
    own, swapped = _fine_on_skin(target, mesh, DETAIL_SIGMA, target, output)
    if own is None:
        return None
    spread = float(own @ own)
    return float(own @ swapped / spread) if spread > 1e-9 else None


def grain(output: np.ndarray, target: np.ndarray, mesh: np.ndarray) -> float | None:
    """The output face's finest detail over the target face's, on the skin (see the module docstring)."""
    own, swapped = _fine_on_skin(target, mesh, GRAIN_SIGMA, target, output)
    if own is None:
        return None
    own_level = float(np.median(np.abs(own)))
    return float(np.median(np.abs(swapped))) / own_level if own_level > 1e-6 else None


def too_sharp(output: np.ndarray, target: np.ndarray, mesh: np.ndarray) -> float | None:
    """The Gaussian sigma (target pixels) the output face lacks to be as soft as the target
    face, at their strongest edges inside the outline; None where too few edges show."""
    height, width = target.shape[:2]
    hull = cv2.convexHull(np.round(mesh[:, :2]).astype(np.int32))
    x, y, w, h = cv2.boundingRect(hull)
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, width), min(y + h, height)
    if x1 - x0 < 16 or y1 - y0 < 16:
        return None
    region = np.zeros((y1 - y0, x1 - x0), np.uint8)
    cv2.fillConvexPoly(region, hull - (x0, y0), 1)
    region = region.astype(bool)
    own = softness(grey(np.ascontiguousarray(target[y0:y1, x0:x1])), region)
    swapped = softness(grey(np.ascontiguousarray(output[y0:y1, x0:x1])), region)
    if own is None or swapped is None:
        return None
    return softening(own, swapped, leeway=0.0)


def shadow_red(output: np.ndarray, target: np.ndarray, mesh: np.ndarray) -> tuple[float | None, float | None]:
    """(output's, target's) shadow red on the target face's skin (see the module docstring);
    Nones when too little skin shows or it has no detail."""
    skin = detail_skin(mesh, target.shape)
    if skin.sum() < MIN_DETAIL_PIXELS:
        return None, None
    sigma = max(SHADOW_SIGMA * float(np.ptp(mesh[:, 0])), 0.5)
    rows, cols = np.nonzero(skin)
    pad = int(4 * sigma) + 2
    y0, y1 = max(0, rows.min() - pad), min(target.shape[0], rows.max() + pad + 1)
    x0, x1 = max(0, cols.min() - pad), min(target.shape[1], cols.max() + pad + 1)
    inside = skin[y0:y1, x0:x1]

    def slope(image: np.ndarray) -> float | None:
        logs = np.log(np.maximum(image[y0:y1, x0:x1].astype(np.float32), 1.0))
        fine = logs - cv2.GaussianBlur(logs, (0, 0), sigma)
        lightness = fine.mean(2)[inside]
        red = fine[..., 0][inside] - lightness
        lightness = lightness - lightness.mean()
        spread = float(lightness @ lightness)
        return -float(lightness @ (red - red.mean())) / spread if spread > 1e-9 else None

    return slope(output), slope(target)


def _fine_on_skin(target: np.ndarray, mesh: np.ndarray, sigma: float, *images: np.ndarray) -> tuple:
    """Each image's fine detail (log-lightness minus its Gaussian low pass of ``sigma``
    pixels) on the target face's skin, at the target's own resolution; Nones when too
    little skin shows."""
    skin = detail_skin(mesh, target.shape)
    if skin.sum() < MIN_DETAIL_PIXELS:
        return (None,) * len(images)
    rows, cols = np.nonzero(skin)
    pad = int(4 * sigma) + 2
    y0, y1 = max(0, rows.min() - pad), min(target.shape[0], rows.max() + pad + 1)
    x0, x1 = max(0, cols.min() - pad), min(target.shape[1], cols.max() + pad + 1)

    def fine(image: np.ndarray) -> np.ndarray:
        lightness = np.log(np.maximum(image[y0:y1, x0:x1].astype(np.float32).mean(2), 1.0))
        return (lightness - cv2.GaussianBlur(lightness, (0, 0), sigma))[skin[y0:y1, x0:x1]]

    return tuple(fine(image) for image in images)


def mouth_opening(mesh: np.ndarray) -> float:
    """The gap between the inner lips' centres over the mouth's width."""
    return float(np.linalg.norm(mesh[13] - mesh[14]) / max(np.linalg.norm(mesh[61] - mesh[291]), 1e-6))


def mouth_report(output: np.ndarray, target: np.ndarray, mesh: np.ndarray) -> MouthReport:
    """The mouth checks of one face (``mesh``: its (468, 2) ground truth in the target)."""
    size = target.shape[:2]
    outer = _polygon(mesh, OUTER_LIPS, size)
    inner = _polygon(mesh, INNER_LIPS, size)
    lips = outer & ~_polygon(mesh, INNER_LIPS, size, 1.15)
    around = _polygon(mesh, OUTER_LIPS, size, 1.6) & ~_polygon(mesh, OUTER_LIPS, size, 1.2)
    if lips.sum() < 16 or around.sum() < 16:
        return MouthReport(None, None, None, None)
    out_lab, target_lab = _lab(output), _lab(target)
    closed = mouth_opening(mesh) < CLOSED_MOUTH
    teeth = None
    if closed:
        skin = out_lab[around]
        skin_light = float(np.median(skin[:, 0]))
        skin_chroma = float(np.median(np.linalg.norm(skin[:, 1:], axis=1)))
        on_lips = out_lab[outer]
        teethlike = (on_lips[:, 0] > skin_light + TEETH_LIGHTER) & (np.linalg.norm(on_lips[:, 1:], axis=1) < TEETH_GREYER * skin_chroma)
        teeth = float(teethlike.mean())
    kept = None
    if not closed and inner.sum() >= 16:
        kept = float(np.linalg.norm(out_lab[inner] - target_lab[inner], axis=1).mean())
    return MouthReport(teeth, _lip_red(out_lab, lips, around), _lip_red(target_lab, lips, around), kept)


def _lip_red(lab: np.ndarray, lips: np.ndarray, around: np.ndarray) -> float:
    return float(np.median(lab[lips][:, 1]) - np.median(lab[around][:, 1]))


def _lab(image: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)
