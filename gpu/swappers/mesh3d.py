"""Built-in weight-free 3D-aware "mesh3d" swapper.

Where ``mesh`` warps the source photo triangle by triangle in 2D (turned heads fold and
smear, and the face keeps the target's shape), this one treats the 468 landmarks with
their depth as a posed instance of MediaPipe's canonical mesh, which has UV coordinates:

- **source, once** (``register``): the photo is unwrapped into a UV texture with a
  per-texel visibility weight (back-facing and hidden triangles 0, grazing ones little);
  9 SH lighting coefficients fitted on its skin split it into lighting and albedo; what
  is not the face's skin (hair over it, background, a hat, deep shadow: ``mesh3d_skin``)
  and what the photo does not show are filled from the mirrored side or the skin around;
  the face's shape is stored with pose and size removed. Several photos of one person
  merge by those per-texel weights (``merge_sources``).
- **target, per frame** (``prepare``): the target's own lighting is fitted on its skin; the
  source's shape offsets (source shape minus the target's running neutral shape) move the
  target's mesh, its eye shape too, tapering to nothing at the mouth opening and partly
  at the outline, so the target keeps its pose and expression; that mesh is rasterised
  with back faces culled (a turned head shows no folded triangles). The source's eyes are
  drawn in the openings, blinking with the target's lids (``eyes: source``, the default),
  or the target's own eyes are moved into the source's eye shape (``eyes: target``: its
  gaze stays); the target's mouth opening stays, all its teeth and gap (found by colour
  inside its lips: a smile's landmarks sit on the teeth). Each crop pixel learns where it
  lies in UV. The target's tone and light come from the target: the re-lit face's
  low-passed lightness over the plain skin is made the target's, and its colour the
  target's own at each spot (``_tone_ratio``), so a grey or colour-cast photo gives only
  its detail and the target's shading survives.
- **per pixel** (``mesh3d_graph``, through the runner): albedo x target lighting, blended
  over a Laplacian pyramid inside a seam fixed in UV (stable over time); the blend mask's
  own fade is narrow (fine detail switches within a few pixels, so none of the target's
  wrinkles or glasses rims show through the face), the pyramid's coarse levels fade the
  low frequencies wide.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import cv2
import numpy as np

from gpu.align import ARCFACE_TEMPLATE_112, estimate_similarity, transform_points
from gpu.device import array_module, is_device_array, to_host
from gpu.errors import NoFaceError
from gpu.kernels.ops import crop_faces
from gpu.kernels.grain import shared_tile
from gpu.kernels.softness import SofteningPerTrack, soften_like_frame
from gpu.kernels.warp import paste_back_keeping_detail, paste_region
from gpu.models.canonical_mesh import (
    INNER_LIP_CONTOUR,
    LEFT_EYE_CONTOUR,
    RIGHT_EYE_CONTOUR,
    canonical_mesh,
    signed_areas,
)
from gpu.options import SwapOptions
from gpu.runners.base import Runner
from gpu.swappers.base import FaceJob, KeepMask, keep_mask
from gpu.swappers.mesh3d_geometry import (
    FACE_OUTLINE,
    LEFT_BROW,
    OUTER_LIP_CONTOUR,
    RIGHT_BROW,
    Similarity,
    fit_pose,
    posed,
    push_pull_fill,
    rasterise,
    texel_facing,
    texel_visibility,
    uv_atlas,
    uv_face_regions,
    uv_polygon_mask,
    vertex_normals,
)
from gpu.swappers.mesh3d_channels import albedo_from_reliable_channels, channel_reliability, from_reliable_channels
from gpu.swappers.mesh3d_eye_light import EyeGainPerTrack, eye_gain, eyes_in_range, relight_eyes
from gpu.swappers.mesh3d_eyewear import remove_eyewear
from gpu.swappers.mesh3d_falloff import position_light
from gpu.swappers.mesh3d_graph import LEVELS, build_mesh3d_swap_graph
from gpu.swappers.mesh3d_lighting import fit_sh, shade
from gpu.swappers.mesh3d_lip_light import LipGeometry, relight_closed_lips
from gpu.swappers.mesh3d_lips import closed_lips
from gpu.swappers.mesh3d_mouth_line import meeting_line, on_the_meeting_line
from gpu.swappers.mesh3d_shadow_colour import coloured_like_skin
from gpu.swappers.mesh3d_skin import skin_confidence
from gpu.types import Face

TEXTURE_SIZE = 384  # source albedo in UV space (256 softened faces over ~200 px wide: a webcam face close up, a photo)
LIGHTING_SIZE = 32  # UV grid of the per-frame lighting fit and shading map (lighting is smooth)
MASK_SIZE = 128  # UV seam masks
COARSE_SIZE = 96  # UV grid of the albedo the tone transfer's low pass samples
TONE_SIGMA = 1 / 10  # of the face's width: the low pass whose colour and light are the target's (finer is the source's;
# 1/8 kept less of the target's shading once the blend stopped fading over a wide band: shading kept 0.75 -> 0.81
# and tone 2.3 -> 2.0 on the tune half's astronaut -> Grace Hopper stills, identity unchanged)
CHROMA_SIGMA_FACE = 1 / 12  # of the face's width: the low pass of the target's colour the face takes
LIGHT_LAYER_STEP = 0.4  # log lightness: the target's light levels the tone's low pass keeps apart
LIGHT_LAYER_CHROMA = (0.3, 0.6)  # log chromaticity (linear light) from the skin's: from / fully not the skin's colour
LIGHT_LAYER_LEAN = 0.02  # a level's own skin support below ~this leans on the plain low pass
TONE_RATIO_RANGE = (0.25, 4.0)  # the most the tone transfer scales a channel
TONE_OUTLIER = (0.15, 0.4)  # |log lightness / its low pass| from which a pixel starts to / stops counting as skin
# in the tone's low pass (glasses frames, a strand of hair, a deep wrinkle: not the skin's tone)
ALBEDO_MAX = 2.0  # albedo is relative to the skin (1); brighter than twice the skin is clipped
EYE_WHITE_MAX = 0.95 * ALBEDO_MAX  # an eye opening whose white is brighter is scaled down whole (see eyes_in_range)
EYE_STILL_PX = 0.5  # crop pixels: an eye moved less than this into the source's eye shape is left as it is
OPENING_EDGE = 0.5  # keep the openings from their own contour inwards: the fade to the source's lids lies inside, none of the target's lid rims shows
MIN_SKIN_TEXELS = 32  # of the lighting atlas's skin texels, to fit a face's light on
TRUSTED_WEIGHT = (0.03, 0.12)  # a texel seen at cos^2 below the first is filled, above the second kept: grazing
# texels (70 deg) stay their own, so a turned head's cheek keeps its detail instead of a smooth fill (a softer
# range blurred the near cheek at 45-60 deg; on the yaw sweep the face's Laplacian energy +8 %)
GRAZING_OUTLIER = (0.25, 0.6)  # |log albedo / skin| (worst channel) from which a texel starts to / stops counting ...
GRAZING_BELOW = 0.5  # ... where it is seen at cos^2 below this (fully at 0): hair or shadow beside a frontal face
OPEN_TARGET_MOUTH = 0.06  # a target's mouth this open (gap over width) keeps its teeth and gap, found by colour; a
# less open one is closed: its lips meet in the source's line. Closed mouths read up to 0.032 (a turned head's: the
# landmarks part a little), smiles 0.16 and more; at 0.03 a turned closed mouth's lip highlight was taken for teeth
# and kept, a pale line between the lips
MOUTH_LIPS_RING = 0.8  # the lips' outer part (outside their outline shrunk to this) is lips whatever a smile's landmarks say
MOUTH_TEETH = (1.08, 0.5)  # teeth: this much brighter than the lips, and redder than grey by less than this share of the lips' red
MOUTH_GAP = 0.55  # the mouth's dark gap: darker than this share of the lips
LIP_TINT_RANGE = (0.6, 1.6)  # the most the lips' colour over the skin is moved towards the target's, per channel
LIP_REDDEST = 50  # percentile of redness: the lips' colour is that of their redder half (the lips' band between
# the outlines also holds the skin-coloured margin of thin lips and the line where they meet: its median read as
# skin, a smiling source's lips stayed a pale band, lip red 2.3 against the targets' 4.4 on the tune half's
# astronaut -> Grace Hopper stills, 4.6 with the redder half, and dlib's distance to the source 0.45 -> 0.43)
LIP_SKIN_AROUND = (1.2, 1.6)  # the skin the lips are compared with: between the outer lips scaled by these
OPEN_MOUTH = 0.06  # a source's mouth this open (gap over width) may show teeth on its lips; a closed one's lips are left as they are
EYE_RED_OVER_SKIN = 0.5  # chromaticity: how much redder than the skin an eye or lid may stay (softly); measured in
# the albedo: a brown iris 0.4 (median, astronaut), red lid rims through glasses up to 2.2 (Grace Hopper)
CHROMA_SMOOTHING = 0.8  # how much of the skin's colour detail gives way to its low-passed colour
CHROMA_SIGMA = 14 / 384  # of the texture: the low pass's sigma (6 kept the red of Grace Hopper's nasolabial folds,
# ~10 texels wide, which the colour match then drew as red folds on the target)
MIRROR_WEIGHT = 0.8  # soft symmetry: how much the mirrored side counts where the own side is not seen
BETTER_SEEN = 0.2  # ... and only as far as it is better seen than the own side (cos^2, by this much: fully). Mixing
# the sides of a frontal photo, equally seen, averaged two different skins into a frontal face's cheeks (cos^2
# ~0.35 there): a fifth of their fine detail gone; they still count as evidence (their mirror is seen)
SIDE_LEVEL_SIGMA = 0.03  # of the texture: the low pass whose level the mirrored side takes from this side where it fills in
SIDE_LEVEL_RANGE = (0.67, 1.5)  # the most that moves the mirrored side's texels, per channel
SIDE_LEVEL_SUPPORT = 0.3  # this side's trusted skin (cos^2 x confidence, low-passed) from which its level is wholly taken
SHADING_RANGE = (0.4, 1.6)  # irradiance kept within this factor of the skin's median
COLOUR_GAIN_RANGE = (0.5, 2.0)
MIDDLE = (0.25, 0.75)  # the colour match's gain averages the skin texels' ratios between these weighted quantiles
TEXELS_PER_CROP_PIXEL = 1.27  # x TEXTURE_SIZE / crop size: how many albedo texels one crop pixel spans (measured
# median over the face, frontal to 45 deg yaw: 1.8-2.1 at 384 / 256)
ANTI_ALIAS_SIGMA = 0.6  # crop pixels: the albedo is low-passed to what the crop can show, once per source. Sampled
# bilinearly at ~2 texels a pixel without it, fine detail (wrinkles, the skin's pores) aliases and shimmers as the
# face moves by fractions of a pixel (Grace Hopper onto the astronaut's clips: flicker 1.08 -> 1.03)
PHOTO_SOFTNESS = 0.5  # photo pixels: the Gaussian sigma an unwrap by bilinear sampling is as soft as
UPSCALE_SHARPENING = (1.2, 2.0, 1.0)  # a source photo's pixel spanning from / fully at this many frame pixels of the
# target (a small photo's face on a larger face) gets its unwrap's softness taken back by an unsharp mask of this
# amount: each photo pixel is blurred over its neighbours there, and the face read as a blurred patch in a sharp
# frame (the astronaut's ~95 px face onto Grace Hopper's: d(out, src) 0.384 -> 0.375, eyes and brows crisp).
# Chosen per frame from the target's face size: sharpening for the crop's size alone made a small photo onto a
# face as small harsh
SHARPENING_STEP = 1 / 8  # the amount is rounded to this, one albedo cached per step in use
SEAM_INSET = 0.008  # the seam runs this far (in UV) inside the mesh outline
FINE_FEATHER = 0.5  # of the feather option: the blend mask's own fade. The pyramid widens it for the low
# frequencies (its coarsest level spans 16 crop pixels), so fine detail switches within a few pixels and no band
# of the face shows the target's wrinkles or glasses rims through the source's (the whole feather there left
# only the middle half of a face wholly the source's: a ghost of the target over a soft mask)
SHAPE_STRENGTH = 1.0  # how much of the source's shape moves the target's mesh
OUTLINE_STRENGTH = 0.35  # ... at the face outline (the cheeks/jaw the mesh ends on)
SHAPE_FADE_CM = 1.2  # distance from the outline over which that fades in
MOUTH_FADE_CM = 0.6  # ... from the inner lips: the mouth opening's shape is mostly expression, which stays the target's
OPEN_MOUTH_LIPS_CM = 0.6  # ... and for a wide-open source mouth, only from this far out (the outer lip line lies
# 0.4-1.0 cm from the inner one): a smile parts the lips ~1.3 cm and draws their outline up and down with it, which on
# a closed target mouth read as thick, soft lips (the sample's: 0.9 cm thicker than the target's, 0.4 cm now). All
# of the lips (1.0 cm) made them the target's but cost identity on the tune half: dlib's distance to the source
# +0.02 on average, the closest frontal pair's margin 0.056 -> 0.009. Their colour and texture stay the source's
OPEN_MOUTH_FADE = (0.06, 0.15)  # the source's mouth opening (gap over width) over which the lips go over to that
NEUTRAL_FRAMES = 60  # the running neutral shape of a track averages about this many frames
NEUTRAL_RESET_CM = 1.5  # a track whose shape jumps this far (mean) is someone else: restart its mean
MAX_TRACKS = 64  # per-track neutral shapes kept (least recently used go first)

# The crop template: the ArcFace 5-point layout shrunk so the face outline fits (as in mesh).
_ZOOM = 0.78
_CROP_TEMPLATE = (ARCFACE_TEMPLATE_112 / 112.0 - np.array([0.5, 0.56], dtype=np.float32)) * _ZOOM + 0.5


@dataclass(frozen=True)
class Mesh3dSource:
    """A registered source face: its albedo in UV space, its lighting and its shape, and
    how much each texel of the albedo is the photo's own view of the face's skin (what
    several photos of one person are merged by, see ``merge_sources``)."""

    albedo: np.ndarray  # (3, T, T) float32 in [0, ALBEDO_MAX]
    lighting: np.ndarray  # (9, 3) float32 SH coefficients of the source photo
    shape: np.ndarray  # (468, 3) float32 canonical-frame shape (pose and size removed)
    weight: np.ndarray | None = None  # (T, T) float32 in [0, 1]: seen (cos^2) x skin confidence; None: all trusted
    photo_texels: float = 0.0  # albedo texels one pixel of the photo spans (0: not known, never sharpened)
    _device: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # derived copies

    def albedo_small(self) -> np.ndarray:
        """(P, 3) the albedo at the lighting atlas's texels (for the colour match)."""
        small = self._device.get("small")
        if small is None:
            atlas = uv_atlas(LIGHTING_SIZE)
            image = cv2.resize(self.albedo.transpose(1, 2, 0), (LIGHTING_SIZE, LIGHTING_SIZE), interpolation=cv2.INTER_AREA)
            small = self._device["small"] = image[atlas.texels]
        return small

    def albedo_image(self) -> np.ndarray:
        """(T, T, 3) the albedo as an image (for sampling parts of it on the host)."""
        image = self._device.get("image")
        if image is None:
            image = self._device["image"] = np.ascontiguousarray(self.albedo.transpose(1, 2, 0))
        return image

    def albedo_coarse(self) -> np.ndarray:
        """(C, C, 3) the albedo shrunk to ``COARSE_SIZE``: what the tone transfer's low pass sees of it."""
        coarse = self._device.get("coarse")
        if coarse is None:
            image = self.albedo.transpose(1, 2, 0)
            coarse = self._device["coarse"] = cv2.resize(image, (COARSE_SIZE, COARSE_SIZE), interpolation=cv2.INTER_AREA)
        return coarse

    def shape_strength(self) -> np.ndarray:
        """(468,) how much of this face's shape each vertex of a target takes: the more open
        its mouth (``OPEN_MOUTH_FADE``), the more of its lips keep the target's shape, since
        their outline is then its expression more than who it is."""
        strength = self._device.get("shape_strength")
        if strength is None:
            wide = np.clip((_mouth_opening(self.shape) - OPEN_MOUTH_FADE[0]) / (OPEN_MOUTH_FADE[1] - OPEN_MOUTH_FADE[0]), 0.0, 1.0)
            strength = uv_masks().shape_strength if wide == 0.0 else _shape_strength(canonical_mesh().vertices, wide * OPEN_MOUTH_LIPS_CM)
            self._device["shape_strength"] = strength
        return strength

    def sharpening(self, texels_per_frame_pixel: float) -> float:
        """How much of the photo's softness to take back on a target whose frame pixel
        spans ``texels_per_frame_pixel`` texels (see ``UPSCALE_SHARPENING``), in steps."""
        if self.photo_texels <= 0.0 or texels_per_frame_pixel <= 0.0:
            return 0.0
        start, full, amount = UPSCALE_SHARPENING
        upscale = self.photo_texels / texels_per_frame_pixel
        share = float(np.clip((upscale - start) / (full - start), 0.0, 1.0))
        return round(amount * share / SHARPENING_STEP) * SHARPENING_STEP

    def sharpened(self, amount: float) -> np.ndarray:
        """(3, T, T) the albedo with ``amount`` of an unsharp mask as wide as the photo's
        unwrap is soft (``PHOTO_SOFTNESS`` photo pixels); the albedo itself at 0."""
        if amount <= 0.0:
            return self.albedo
        sharp = self._device.get(("sharpened", amount))
        if sharp is None:
            soft = cv2.GaussianBlur(self.albedo_image(), (0, 0), PHOTO_SOFTNESS * self.photo_texels)
            sharp = np.clip(self.albedo_image() * (1.0 + amount) - soft * amount, 0.0, ALBEDO_MAX)
            sharp = self._device[("sharpened", amount)] = np.ascontiguousarray(sharp.transpose(2, 0, 1), dtype=np.float32)
        return sharp

    def albedo_like(self, frame, sharpening: float = 0.0) -> object:
        """The albedo (``sharpened`` by ``sharpening``) on the frame's device: uploaded once
        per source and amount, not once per frame."""
        albedo = self.sharpened(sharpening)
        if not is_device_array(frame):
            return albedo
        uploaded = self._device.get(("device", sharpening))
        if uploaded is None:
            uploaded = self._device[("device", sharpening)] = array_module(frame).asarray(albedo)
        return uploaded


@dataclass(frozen=True)
class _UvMasks:
    """Masks painted once in UV space (fixed on the face, so stable over time)."""

    seam: np.ndarray  # (M, M) the swapped region: the outline moved inwards
    seam_no_mouth: np.ndarray  # the same without the lips (the mouth mask option)
    tone_skin: np.ndarray  # (M, M) plain skin, what the tone transfer compares (no eyes, brows, lips)
    skin: np.ndarray  # (L*L,) per lighting texel: 1 on plain skin (no eyes, brows, lips)
    shape_strength: np.ndarray  # (468,) how much of a closed-mouthed source's shape each vertex takes


def _uv_masks() -> _UvMasks:
    mesh = canonical_mesh()
    outline = uv_polygon_mask(MASK_SIZE, FACE_OUTLINE)
    inset = max(1, int(round(SEAM_INSET * MASK_SIZE)))
    seam = cv2.erode(outline, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * inset + 1,) * 2))
    lips = cv2.dilate(uv_polygon_mask(MASK_SIZE, OUTER_LIP_CONTOUR), np.ones((5, 5), np.uint8))
    tone_inner, tone_features = uv_face_regions(MASK_SIZE)
    return _UvMasks(seam=seam, seam_no_mouth=seam * (1.0 - lips), skin=plain_skin_texels(LIGHTING_SIZE),
                    tone_skin=(tone_inner * (1.0 - tone_features)).astype(np.float32),
                    shape_strength=_shape_strength(mesh.vertices))


def _shape_strength(vertices: np.ndarray, lips_cm: float = 0.0) -> np.ndarray:
    """Per vertex: full strength inside the face, the eye lids too (the eye's shape is who
    the face is), fading to nothing around the inner lips (the target's mouth opening stays
    where it is and keeps its expression; nothing at all within ``lips_cm`` of it) and to
    ``OUTLINE_STRENGTH`` on the outline (no seam where the mesh ends)."""

    def distance_to(ids: tuple[int, ...]) -> np.ndarray:
        return np.linalg.norm(vertices[:, None] - vertices[list(ids)][None], axis=-1).min(1)

    near_opening = np.clip((distance_to(INNER_LIP_CONTOUR) - lips_cm) / MOUTH_FADE_CM, 0.0, 1.0)
    outline = distance_to(FACE_OUTLINE)
    near_outline = OUTLINE_STRENGTH + (1.0 - OUTLINE_STRENGTH) * np.clip(outline / SHAPE_FADE_CM, 0.0, 1.0)
    return (SHAPE_STRENGTH * np.minimum(near_opening, near_outline)).astype(np.float32)


@lru_cache(maxsize=2)
def plain_skin_texels(size: int) -> np.ndarray:
    """(P,) per texel of the ``size`` atlas: 1 on plain skin (no eyes, brows, lips)."""
    inner, features = uv_face_regions(size)
    return (inner * (1.0 - features))[uv_atlas(size).texels].astype(np.float32)


@lru_cache(maxsize=1)
def uv_masks() -> _UvMasks:
    """The UV masks, painted once per process."""
    return _uv_masks()


def _require_depth(face: Face, role: str) -> np.ndarray:
    if face.mesh is None or face.depth is None:
        raise NoFaceError(f"the {role} face has no 3D landmarks (face mesh found no face)")
    return posed(face.mesh, face.depth)


@dataclass(frozen=True)
class _EyeWarp:
    """The target's own eyes moved into the openings of the source's eye shape, over a box
    of the crop: where each of its pixels reads the crop, and how much it is eye."""

    box: tuple[int, int, int, int]  # y0, y1, x0, x1 in crop pixels
    map: np.ndarray  # (h, w, 2) crop positions (x, y)
    weight: np.ndarray  # (h, w) in [0, 1]


@dataclass(frozen=True)
class _SkinLighting:
    """A face's lighting fitted on its visible skin, with what it was fitted on."""

    coefficients: np.ndarray  # (9, 3) SH coefficients
    texels: np.ndarray  # (U,) indices into the lighting atlas's texels that were used
    weights: np.ndarray  # (U,) their fit weights (visibility x skin)
    colours: np.ndarray  # (U, 3) their observed colours in [0, 1]
    normals: np.ndarray  # (U, 3) their unit normals
    typical: np.ndarray  # (3,) median irradiance of the skin that was fitted

    def shading(self, normals: np.ndarray) -> np.ndarray:
        """(P, 3) irradiance of unit normals, kept within a plausible range of the skin's
        own (the SH fit extrapolates wildly at normals it never saw, e.g. grazing ones)."""
        return np.clip(shade(normals, self.coefficients), SHADING_RANGE[0] * self.typical, SHADING_RANGE[1] * self.typical)


def _source_lit(source: Mesh3dSource) -> _SkinLighting:
    """The source photo's own lighting, fitted on nothing of the target."""
    empty = np.zeros((0, 3), dtype=np.float32)
    typical = shade(np.array([[0.0, 0.0, -1.0]]), source.lighting)[0]
    return _SkinLighting(source.lighting, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32), empty, empty, typical)


def _skin_mean(values: np.ndarray, skin: np.ndarray) -> np.ndarray:
    """(C,) the mean of per-texel ``values`` (P, C) over the skin (``skin`` (P,) weights)."""
    return (values * skin[:, None]).sum(0) / max(float(skin.sum()), 1e-6)


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)


def _skin_lighting(points: np.ndarray, sample, occlusion: bool, kept: np.ndarray | None = None) -> _SkinLighting | None:
    """Fit the lighting of a posed face on its seen skin, or None when too little skin is
    seen (a profile); ``sample`` maps (P, 2) image positions to (P, 3) colours in [0, 1].
    Without ``occlusion`` the z-buffer test is left out (per frame: the robust fit shrugs
    off the few texels a nose hides)."""
    mesh = canonical_mesh()
    atlas = uv_atlas(LIGHTING_SIZE)
    vertex_normal = vertex_normals(points, mesh.triangles)  # once: the visibility and the fit both need them
    if occlusion:
        scale = min(1.0, 96.0 / max(float(np.ptp(points[:, 0])), 1.0))
        visibility = texel_visibility(points, atlas, scale=scale, normals=vertex_normal)
    else:
        visibility = texel_facing(points, atlas, vertex_normal)
    weights = visibility * uv_masks().skin
    if kept is not None:  # what is in front of the face (a keep mask over the crop) is not its skin
        at = np.clip(np.round(atlas.interpolate(points[:, :2])).astype(np.int64), 0, kept.shape[0] - 1)
        weights = weights * (1.0 - kept[at[:, 1], at[:, 0]])
    texels = np.nonzero(weights > 0.05)[0]
    if len(texels) < MIN_SKIN_TEXELS:
        return None
    normals = _unit(atlas.interpolate(vertex_normal)[texels])
    colours = sample(atlas.interpolate(points[:, :2])[texels])
    coefficients = fit_sh(normals, colours, weights[texels])
    typical = np.median(shade(normals, coefficients), axis=0)
    return _SkinLighting(coefficients, texels, weights[texels], colours, normals, typical)


class Mesh3dSwapper:
    """Swapper contract implementation for the 3D-aware built-in swap."""

    name = "mesh3d"

    def __init__(self, runner: Runner | None = None, crop_size: int = 256) -> None:
        from gpu.runners.onnxruntime import OnnxRuntimeRunner

        if crop_size % (2**LEVELS):
            raise ValueError(f"mesh3d crop size must be a multiple of {2**LEVELS}, not {crop_size}")
        self.runner: Runner = runner or OnnxRuntimeRunner(build_mesh3d_swap_graph(), name="mesh3d_swap")
        self.crop_size = crop_size
        self._template = _CROP_TEMPLATE * crop_size
        self._neutral: OrderedDict[int, tuple[np.ndarray, int]] = OrderedDict()
        self._neutral_lock = threading.Lock()
        self._grain = shared_tile()
        self._softening = SofteningPerTrack(MAX_TRACKS)
        self._eye_gains = EyeGainPerTrack(MAX_TRACKS)

    def alignment(self, face: Face) -> np.ndarray:
        """Frame pixels -> aligned crop pixels for this face."""
        return estimate_similarity(face.kps, self._template)

    # -- source ---------------------------------------------------------------------------

    def register(self, image: np.ndarray, face: Face) -> Mesh3dSource:
        points = _require_depth(face, "source")
        image = to_host(image)
        mesh = canonical_mesh()
        atlas = uv_atlas(TEXTURE_SIZE)
        visibility = texel_visibility(points, atlas)
        if visibility.sum() < 0.05 * len(visibility):
            raise NoFaceError("the source face is turned too far away to be used; use a more frontal photo")
        at = atlas.interpolate(points[:, :2])
        colours = _sample_image(image, at)
        lighting = _skin_lighting(points, lambda at: _sample_image(image, at), occlusion=True)
        if lighting is None:
            raise NoFaceError("too little of the source face's skin is visible; use a more frontal photo")
        skin = visibility * plain_skin_texels(TEXTURE_SIZE)
        # a channel the photo crushed to black or clipped white holds no picture: the others' detail stands in
        reliability = channel_reliability(colours)
        shading = np.maximum(lighting.shading(_unit(atlas.interpolate(vertex_normals(points, mesh.triangles)))), 1e-3)
        shading = shading * position_light(albedo_from_reliable_channels(colours / shading, reliability), at, skin)[:, None]
        albedo = albedo_from_reliable_channels(colours / shading, reliability)
        albedo = np.clip(eyes_in_range(albedo, _eye_texels(atlas.size), visibility, EYE_WHITE_MAX), 0.0, ALBEDO_MAX)
        visibility = visibility * (1.0 - _grazing_outliers(albedo, visibility))
        albedo_image = atlas.scatter(albedo)
        weight_image = atlas.scatter(visibility[:, None])[..., 0]
        filled = _without_eyewear(symmetric_fill(albedo_image, weight_image), symmetric_fill(albedo_image, weight_image, blend_sides=True))
        # what is not the face's skin (hair over it, the background, a hat, deep shadow)
        # counts for little, judged once the glasses are out: the mirrored side or the fill
        # takes over there
        confidence = skin_confidence(filled, weight_image)
        filled = symmetric_fill(filled, weight_image, confidence)
        if _mouth_opening(points) > OPEN_MOUTH:
            filled = closed_lips(filled)
        filled = _smooth_skin_chroma(filled)
        photo_texels = texels_per_pixel(points, atlas.size)
        filled = self._anti_aliased(filled, photo_texels)
        shape = fit_pose(points).normalise(points)
        return Mesh3dSource(
            albedo=np.ascontiguousarray(filled.transpose(2, 0, 1), dtype=np.float32),
            lighting=from_reliable_channels(lighting.coefficients, _skin_mean(reliability, skin)),
            shape=shape.astype(np.float32),
            weight=np.clip(weight_image * confidence, 0.0, 1.0).astype(np.float32),
            photo_texels=photo_texels,
        )

    def _anti_aliased(self, albedo: np.ndarray, photo_texels_per_pixel: float = 0.0) -> np.ndarray:
        """The albedo without detail finer than the crop's pixels: GridSample has no mip
        levels, so that detail would alias into a shimmer that moves with sub-pixel motion.
        What the photo never held is not taken twice: a photo whose face spans fewer pixels
        than the texture has texels (``photo_texels_per_pixel`` texels a photo pixel) is
        already that soft (its bilinear unwrap, ~half a photo pixel), and only the rest
        of the low pass is applied (the whole of it made a ~100 px source's swap a third
        smoother at the finest scales than the same face unswapped)."""
        needed = ANTI_ALIAS_SIGMA * self._texels_per_crop_pixel(albedo.shape[0])
        already = PHOTO_SOFTNESS * photo_texels_per_pixel
        sigma = float(np.sqrt(max(needed**2 - already**2, 0.0)))
        if sigma < 0.2:
            return albedo
        return cv2.GaussianBlur(albedo, (0, 0), sigma).astype(np.float32)

    def _texels_per_crop_pixel(self, texture_size: int) -> float:
        """How many texels of a ``texture_size`` albedo one crop pixel spans."""
        return TEXELS_PER_CROP_PIXEL * texture_size / self.crop_size

    # -- target ---------------------------------------------------------------------------

    def prepare(self, frame: np.ndarray, face: Face, source: Mesh3dSource, options: SwapOptions,
                keep: KeepMask | None = None) -> FaceJob:
        if face.mesh is None or face.depth is None:
            raise ValueError("the mesh3d swapper needs target faces with a mesh and its depth")
        size = self.crop_size
        xp = array_module(frame)
        matrix = self.alignment(face)
        crop = crop_faces([frame], matrix[None], size)[0]
        host_crop = to_host(crop)  # what the host-side steps read (one download on a GPU node)
        scale = float(np.sqrt(abs(np.linalg.det(matrix[:, :2]))))

        points = posed(face.mesh, face.depth)
        pose = fit_pose(points)
        target = self._in_crop(points, matrix, scale)
        moved = self._in_crop(self._transfer_shape(points, pose, face.track_id, source), matrix, scale)

        # a face turned too far to fit its light on is lit as the source photo was
        occluded = keep_mask(keep, crop, face, matrix)
        lighting = _skin_lighting(target, lambda at: _sample_crop(crop, at), occlusion=False, kept=occluded) or _source_lit(source)
        uv, rendered, holes, grid, eye_map = self._render(moved, options.eyes == "target", target)
        closed_mouth = _mouth_opening(target) <= OPEN_TARGET_MOUTH
        if closed_mouth:  # the lips meet in a thin line, along the landmarks' curve
            grid = on_the_meeting_line(grid, meeting_line(moved), scale)
        else:
            rendered, holes = _with_mouth_interior(host_crop, target, rendered, holes)
        shading_map = self._shading(moved, lighting, source, options.colour_match)
        shading = cv2.remap(shading_map, uv[..., 0] * LIGHTING_SIZE - 0.5, uv[..., 1] * LIGHTING_SIZE - 0.5,
                            cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        if options.colour_match:
            shading *= _tone_ratio(host_crop, uv, rendered, shading, source, occluded, float(np.ptp(target[:, 0])))
            _tint_lips(shading, host_crop, target, uv, rendered, source)
            if closed_mouth:
                _relight_closed_lips(shading, host_crop, target, moved, uv, rendered, source)
            if options.eyes != "target":
                gain = self._eye_gains.known(face.track_id)
                if gain is None:
                    reading = _eye_gain(host_crop, target, moved, uv, rendered, source, occluded, shading)
                    gain = self._eye_gains.update(face.track_id, reading)
                if gain is not None:
                    relight_eyes(shading, gain, moved, rendered)
        mask, openings = self._mask(uv, rendered, holes, options.mouth_mask, options.feather)
        if occluded is not None:  # out of the pyramid too: no halo of the face's colour around an occluder
            mask, openings = mask * (1.0 - occluded), np.maximum(openings, occluded)
        target_planes = xp.ascontiguousarray(crop.transpose(2, 0, 1), dtype=np.float32) / 255.0
        kept_as_is = openings
        if eye_map is not None:  # the target's eyes, in the source's eye shape
            eyes, target_planes = _target_eyes(host_crop, eye_map, target_planes, xp)
            kept_as_is = openings * (1.0 - eyes)
        paste = self._paste_mask(mask) * (1.0 - kept_as_is)  # kept pixels stay the frame's own, not resampled ones
        # the frame's own detail the crop's round trip loses comes back (see paste_back_keeping_detail)
        context = {"mask": paste, "target": host_crop, "face": np.minimum(mask, 1.0 - kept_as_is), "track": face.track_id,
                   "scale": scale}
        feeds = {
            "target": target_planes,
            "albedo": source.albedo_like(frame, source.sharpening(self._texels_per_crop_pixel(source.albedo.shape[-1]) * scale)),
            "shading": xp.asarray(np.ascontiguousarray(shading.transpose(2, 0, 1))),
            "grid": xp.asarray(grid),
            "mask": xp.asarray(mask)[None],
            "keep": xp.asarray(openings)[None],
            "blend": xp.full((1, 1, 1), options.blend, dtype=np.float32),
        }
        return FaceJob(feeds=feeds, matrix=matrix, context=context)

    def finish(self, frame: np.ndarray, job: FaceJob, row: Sequence[np.ndarray]) -> None:
        xp = array_module(frame)
        planes = xp.asarray(row[0])
        # (S, S, 3) in one contiguous buffer, scaled and rounded in place: OpenCV's merge
        # interleaves the planes in a third of the time of NumPy's strided transpose, and
        # the paste's warp then reads the crop without copying it first
        swapped = cv2.merge(list(planes)) if xp is np else xp.ascontiguousarray(planes.transpose(1, 2, 0))
        swapped *= 255.0
        swapped += 0.5
        xp.clip(swapped, 0, 255, out=swapped)

        # as soft as the frame round it (a crisp photo on a webcam's soft face read as a mask)
        context = job.context
        swapped = soften_like_frame(to_host(swapped.astype(np.uint8)), context["target"], context["face"], context["scale"],
                                    context["track"], self._softening)

        def paste(image: np.ndarray, matrix: np.ndarray) -> None:
            paste_back_keeping_detail(image, swapped, context["target"], context["mask"], context["face"], matrix,
                                      self._grain)

        if xp is np:
            paste(frame, job.matrix)
            return
        # a device frame: its region makes the round trip to the host (a face's worth of pixels; the tone
        # transfer reads the crop there already), so both paths give the same frame
        region = paste_region(job.context["mask"], job.matrix, frame.shape[:2])
        if region is None:
            return
        (x0, y0, x1, y1), roi_matrix = region
        part = to_host(frame[y0:y1, x0:x1])
        paste(part, roi_matrix)
        frame[y0:y1, x0:x1] = xp.asarray(part)

    @staticmethod
    def _in_crop(points: np.ndarray, matrix: np.ndarray, scale: float) -> np.ndarray:
        return np.concatenate([transform_points(points[:, :2], matrix), points[:, 2:] * scale], axis=1).astype(np.float64)

    def _transfer_shape(self, points: np.ndarray, pose: Similarity, track_id: int | None, source: Mesh3dSource) -> np.ndarray:
        """The target's mesh moved by the source's identity offsets (source shape minus
        the target's neutral shape, both pose-normalised), in the target's pose."""
        shape = pose.normalise(points)
        neutral = self._neutral_shape(track_id, shape)
        offsets = (source.shape - neutral) * source.shape_strength()[:, None]
        return points + pose.apply_offsets(offsets)

    def _neutral_shape(self, track_id: int | None, shape: np.ndarray) -> np.ndarray:
        """The running mean of a video track's pose-normalised shape (its expression
        averages out, so what the offsets change is identity, not expression); a still
        image (no track, or a negative id) is its own neutral."""
        if track_id is None or track_id < 0:
            return shape
        with self._neutral_lock:
            mean, count = self._neutral.pop(track_id, (shape, 0))
            if count and float(np.linalg.norm(mean - shape, axis=1).mean()) > NEUTRAL_RESET_CM:
                mean, count = shape, 0  # ids restart per stream: another stream's face
            count = min(count + 1, NEUTRAL_FRAMES)
            mean = mean + (shape - mean) / count
            self._neutral[track_id] = (mean, count)
            while len(self._neutral) > MAX_TRACKS:
                self._neutral.popitem(last=False)
        return mean

    def _render(self, points: np.ndarray, target_eyes: bool = True, original: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, _EyeWarp | None]:
        """Rasterise the posed mesh at half resolution, back faces culled, z-buffered: the
        UV position of each pixel (half res, (S/2, S/2, 2), -1 where nothing is), whether
        the face is drawn there, whether a kept opening is there (the mouth's, and the eyes'
        with ``target_eyes``; otherwise the source's eyes are drawn there, opening and closing
        with the target's lids),
        GridSample's grid at full resolution (the map is affine per triangle, so bilinear
        upsampling is exact inside triangles), and with ``target_eyes`` and the target's
        own mesh (``original``, crop pixels) the eye warp: where the eye openings, drawn in
        the source's eye shape, find the target's own eye (its gaze and blinks in the
        source's lids), None where no eye opening shows."""
        mesh = canonical_mesh()
        half = self.crop_size // 2
        small = points.copy()
        small[:, :2] = points[:, :2] * 0.5 - 0.25  # full-res pixel centres -> half-res
        raster = rasterise(small, mesh.triangles, signed_areas(small, mesh.triangles) < 0, (half, half))
        drawn = raster.covered
        closure = mesh.closure if target_eyes else mesh.mouth_closure
        holes = drawn & closure[np.maximum(raster.triangle, 0)]
        # a closed mouth's line is the source's (where its lips meet, in UV): the target's own line kept
        # there showed its lips' colour as dashes between the source's lips
        # the openings get UVs too (they are never shown) so no pixel next to them samples (0, 0)
        pixels = raster.rows * half + raster.cols
        corners = mesh.triangles[raster.triangle.reshape(-1)[pixels]]
        uv = np.full((half * half, 2), -1.0, dtype=np.float32)
        weights = raster.weights
        for axis, texture in enumerate(_uv_columns()):  # per axis, written out: half the time of an einsum over (P, 3, 2)
            uv[pixels, axis] = (weights[:, 0] * texture[corners[:, 0]] + weights[:, 1] * texture[corners[:, 1]]
                                + weights[:, 2] * texture[corners[:, 2]])
        uv = uv.reshape(half, half, 2)
        grid = cv2.resize(uv * 2.0 - 1.0, (self.crop_size, self.crop_size), interpolation=cv2.INTER_LINEAR)
        eye_map = None
        if target_eyes and original is not None:
            eyes = (drawn & mesh.eye_closure[np.maximum(raster.triangle, 0)]).reshape(-1)[pixels]
            if eyes.any():
                eye_map = self._eye_warp(pixels[eyes], weights[eyes], original[corners[eyes], :2], half)
        return uv, drawn & ~holes, holes, grid, eye_map

    def _eye_warp(self, pixels: np.ndarray, weights: np.ndarray, own: np.ndarray, half: int) -> _EyeWarp:
        """Where the eye openings' pixels (flat half-resolution ``pixels`` with their
        barycentric ``weights``) find the target's own eye: the same place in the target's
        own (unmoved) triangles, ``own`` (E, 3, 2) crop pixels. Worked out over the eyes' box."""
        rows, cols = np.divmod(pixels, half)
        top, left = max(int(rows.min()) - 2, 0), max(int(cols.min()) - 2, 0)
        bottom, right = min(int(rows.max()) + 3, half), min(int(cols.max()) + 3, half)
        ys, xs = np.mgrid[top:bottom, left:right].astype(np.float32)
        at = np.stack([xs * 2.0 + 0.5, ys * 2.0 + 0.5], -1)  # each pixel's own full-resolution position
        found = np.einsum("ek,ekc->ec", weights, own).astype(np.float32)
        # where the eye hardly moves, the frame's own pixels stay (not resampled twice: pupils blur)
        moved = np.clip(np.linalg.norm(found - at[rows - top, cols - left], axis=1) / EYE_STILL_PX, 0.0, 1.0)
        at[rows - top, cols - left] = found
        inside = np.zeros(ys.shape, np.float32)
        inside[rows - top, cols - left] = moved
        size = (2 * (right - left), 2 * (bottom - top))
        weight = cv2.GaussianBlur(cv2.resize(inside, size, interpolation=cv2.INTER_LINEAR), (0, 0), 1.0)
        return _EyeWarp((2 * top, 2 * bottom, 2 * left, 2 * right), cv2.resize(at, size, interpolation=cv2.INTER_LINEAR), weight)

    def _shading(self, points: np.ndarray, lighting: _SkinLighting, source: Mesh3dSource, colour_match: bool) -> np.ndarray:
        """(L, L, 3) target irradiance over the UV map of the rendered mesh. With colour
        match, scaled so the re-lit source skin has the target skin's colour where it was
        seen (SH shading x relative albedo alone drifts by the albedo's mean): the mean of
        the middle half of the ratios per channel, not the ratio of means, so a source's
        dark red folds or hair over a target's cheek do not tint the plain skin (a mean
        turned it green-grey); without,
        so the skin keeps the source's colour and only the light is the target's."""
        mesh = canonical_mesh()
        atlas = uv_atlas(LIGHTING_SIZE)
        shading = lighting.shading(_unit(atlas.interpolate(vertex_normals(points, mesh.triangles))))
        if not len(lighting.texels):
            gain = np.ones(3, dtype=np.float32)
        elif colour_match:
            albedo = source.albedo_small()[lighting.texels]
            predicted = albedo * lighting.shading(lighting.normals)
            ratios = np.log(np.maximum(lighting.colours, 1e-3) / np.maximum(predicted, 1e-3))
            gain = np.exp([_weighted_middle_mean(ratios[:, channel], lighting.weights) for channel in range(3)])
        else:
            gain = source.lighting[0] / np.maximum(lighting.coefficients[0], 1e-3)
        shading = shading * np.clip(gain, *COLOUR_GAIN_RANGE)[None, :]
        return push_pull_fill(atlas.scatter(shading), atlas.scatter(np.ones((len(shading), 1)))[..., 0], levels=3)

    def _mask(self, uv: np.ndarray, rendered: np.ndarray, holes: np.ndarray, own_lips: bool, feather: float
              ) -> tuple[np.ndarray, np.ndarray]:
        """The feathered blend mask (S, S): the UV seam seen through the render, minus the
        target's eyes and mouth opening (and with the mouth mask its lips); and where the
        target must stay untouched (S, S): those openings. The UV seam and the openings
        are fixed on the face, so the edge does not crawl from frame to frame."""
        half = self.crop_size // 2
        masks = uv_masks()
        seam = masks.seam_no_mouth if own_lips else masks.seam
        coords = uv * MASK_SIZE - 0.5
        region = cv2.remap(seam, coords[..., 0], coords[..., 1], cv2.INTER_LINEAR, borderValue=0.0)
        region = region * (rendered | holes)
        radius = max(1, int(round(feather * half * FINE_FEATHER)))
        kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (radius + 1, radius + 1))
        core = cv2.erode(region, kernel)  # erode first so the fade lies inside the rendered face
        soft = cv2.GaussianBlur(core, (0, 0), sigmaX=radius / 2.0)
        # the eyes and the mouth opening: a narrow fade (their rims are strong edges already)
        openings = cv2.GaussianBlur(holes.astype(np.float32), (0, 0), sigmaX=0.75)
        # zero on the render's rim too: upsampling there would blend in pixels the face does not cover
        inside = cv2.erode((rendered | holes).astype(np.uint8), np.ones((3, 3), np.uint8))
        keep = np.clip((openings - OPENING_EDGE) / (1.0 - OPENING_EDGE) * 1.5, 0.0, 1.0)
        # the openings stay in the blend mask (the face is drawn under them, from the source's
        # eyes and mouth), so every pyramid level is whole around them and none of the
        # target's lids or glasses leak through the low frequencies; ``keep`` cuts them out
        small = soft * inside
        size = (self.crop_size, self.crop_size)
        # clipped: the blurs and resizes round a little past 1, and the graph's ceil(mask) (where the face was
        # rendered) would read 1.0000001 as 2, doubling the change (at a 384 crop: the target's nose and glasses
        # came through the middle of the face)
        mask = np.clip(cv2.resize(small, size, interpolation=cv2.INTER_LINEAR), 0.0, 1.0)
        return mask, cv2.resize(keep, size, interpolation=cv2.INTER_LINEAR)

    def _paste_mask(self, mask: np.ndarray) -> np.ndarray:
        """Where the pasted crop replaces the frame: the blend mask grown by the reach of the
        pyramid's coarse levels (outside it the crop is the target, resampled). Grown at
        half resolution; cut off where it is negligible, since the paste's cost follows the
        region the mask reaches."""
        half = self.crop_size // 2
        small = cv2.resize(mask, (half, half), interpolation=cv2.INTER_AREA)
        grown = cv2.GaussianBlur(small, (0, 0), sigmaX=2 ** (LEVELS - 2)) * 3.0
        grown[grown < 0.02] = 0.0
        paste = cv2.resize(np.clip(np.maximum(small, grown), 0.0, 1.0), (self.crop_size, self.crop_size), interpolation=cv2.INTER_LINEAR)
        return np.maximum(paste, mask).astype(np.float32)


def _target_eyes(crop: np.ndarray, warp: _EyeWarp, planes, xp) -> tuple[np.ndarray, object]:
    """The target's own eyes drawn into its planes (3, S, S) where ``warp`` moves them:
    (how much each crop pixel is eye, (S, S), the planes)."""
    size = crop.shape[0]
    y0, y1, x0, x1 = warp.box
    eyes = np.zeros((size, size), np.float32)
    eyes[y0:y1, x0:x1] = warp.weight
    warped = cv2.remap(crop, warp.map[..., 0], warp.map[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    drawn = xp.asarray(np.ascontiguousarray(warped.transpose(2, 0, 1), dtype=np.float32) / 255.0)
    inside = xp.asarray(warp.weight)[None]
    planes[:, y0:y1, x0:x1] += (drawn - planes[:, y0:y1, x0:x1]) * inside
    return eyes, planes


def _tone_ratio(crop: np.ndarray, uv: np.ndarray, rendered: np.ndarray, shading: np.ndarray, source: Mesh3dSource,
                kept: np.ndarray | None, width: float) -> np.ndarray:
    """(S/2, S/2, 3) what the re-lit face is multiplied by so that it takes the target's
    colour and light (a frequency split, worked out at a quarter of the crop's resolution):

    - lightness: low-passed over the plain skin both faces show (a Gaussian of
      ``TONE_SIGMA`` of the face's ``width``), the face's is made the target's: its tone,
      its cheekbones' and nose's shading, the warmth or dimness of its light; everything
      finer (features, wrinkles, pores) stays the source's. The low pass does not average
      across the target's light levels (``_light_layers``): a hat brim's, a window frame's
      or a split light's hard shadow keeps its edge on the swapped face (blurred away, the
      face was lit where the hair and ears round it were in shadow);
    - colour (chromaticity): the target's own at each spot, low-passed only over
      ``CHROMA_SIGMA`` of the face's width and over the whole face (its lips' red, its
      cheeks' flush): a grey, sepia or colour-cast source photo gives only lightness.

    Glasses frames, strands of hair and deep wrinkles are not the skin's tone (pixels far
    from their own low pass count for little), nor is anything kept in front of the face."""
    half = uv.shape[0]
    quarter = half // 2
    small_uv = np.ascontiguousarray(uv[::2, ::2])
    face_region = rendered[::2, ::2].astype(np.float32)
    if kept is not None:
        face_region *= 1.0 - cv2.resize(kept, (quarter, quarter), interpolation=cv2.INTER_AREA)
    coords = small_uv * MASK_SIZE - 0.5
    skin = cv2.remap(uv_masks().tone_skin, coords[..., 0], coords[..., 1], cv2.INTER_LINEAR, borderValue=0.0) * face_region
    target = cv2.resize(crop, (quarter, quarter), interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0
    coarse = source.albedo_coarse()
    face = cv2.remap(coarse, small_uv[..., 0] * COARSE_SIZE - 0.5, small_uv[..., 1] * COARSE_SIZE - 0.5, cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_REPLICATE) * cv2.resize(shading, (quarter, quarter), interpolation=cv2.INTER_AREA)
    target_light, face_light = target.mean(2) + 1e-3, face.mean(2) + 1e-3
    sigma = TONE_SIGMA * width / 4.0
    layers = _light_layers(target, target_light, skin, sigma)
    plain = _near_own_low_pass(target_light, skin, sigma, layers) * _near_own_low_pass(face_light, skin, sigma)
    weight = skin * plain
    lows, support = _layered_low_pass(np.stack([target_light, face_light], axis=-1), weight, sigma, layers)
    light = lows[..., :1] / np.maximum(lows[..., 1:], 1e-3)
    colour_sigma = CHROMA_SIGMA_FACE * width / 4.0
    colour_weight = skin * plain
    target_colour, colour_support = _masked_low_pass(target / target_light[..., None], colour_weight, colour_sigma)
    face_colour, _ = _masked_low_pass(face / face_light[..., None], colour_weight, colour_sigma)
    colour = target_colour / np.maximum(face_colour, 1e-3)
    ratio = np.clip(light * colour, *TONE_RATIO_RANGE)
    # where no skin is near (an occluder's middle) the ratio fades to 1 rather than extrapolate
    trust = np.clip(np.minimum(support, colour_support) / 0.05, 0.0, 1.0)[..., None]
    ratio = 1.0 + trust * (ratio - 1.0)
    return cv2.resize(ratio.astype(np.float32), (half, half), interpolation=cv2.INTER_LINEAR)


def _tint_lips(shading: np.ndarray, crop: np.ndarray, points: np.ndarray, uv: np.ndarray, rendered: np.ndarray,
               source: Mesh3dSource) -> None:
    """Give the re-lit lips the target's lips' colour over its skin, in place on ``shading``
    (S/2, S/2, 3): per channel, the re-lit lips over the re-lit skin around them are made
    what the target's lips are over its skin (each side's lips: the redder half of its lips'
    band, ``LIP_REDDEST``); the lips' shape and fine detail stay the source's. The tone
    transfer leaves the lips out (their red is not the skin's), so they kept the photo's
    contrast to its skin: none from a black-and-white photo, little from a smiling one
    whose lips were stretched thin; either read as a pale band, not as lips."""
    half = uv.shape[0]
    small = points[:, :2] * 0.5 - 0.25
    lips = small[list(OUTER_LIP_CONTOUR)]
    centre = lips.mean(0)
    reach = centre + (lips - centre) * LIP_SKIN_AROUND[1]
    x0, y0 = np.maximum(np.floor(reach.min(0)).astype(int) - 2, 0)
    x1, y1 = np.minimum(np.ceil(reach.max(0)).astype(int) + 3, half)
    if x1 - x0 < 8 or y1 - y0 < 6:
        return

    def polygon(ids: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
        mask = np.zeros((y1 - y0, x1 - x0), np.float32)
        corners = centre + (small[list(ids)] - centre) * scale - (x0, y0)
        cv2.fillPoly(mask, [np.round(corners * 16).astype(np.int32)], 1.0, cv2.LINE_AA, shift=4)
        return mask

    drawn = rendered[y0:y1, x0:x1]
    ring = (polygon(OUTER_LIP_CONTOUR) > 0.5) & (polygon(INNER_LIP_CONTOUR, 1.15) < 0.5) & drawn
    around = (polygon(OUTER_LIP_CONTOUR, LIP_SKIN_AROUND[1]) > 0.5) & (polygon(OUTER_LIP_CONTOUR, LIP_SKIN_AROUND[0]) < 0.5) & drawn
    if ring.sum() < 8 or around.sum() < 8:
        return
    box_uv = uv[y0:y1, x0:x1]
    albedo = source.albedo_image()
    size = albedo.shape[0]
    face = cv2.remap(albedo, box_uv[..., 0] * size - 0.5, box_uv[..., 1] * size - 0.5, cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_REPLICATE) * shading[y0:y1, x0:x1]
    target = cv2.resize(crop, (half, half), interpolation=cv2.INTER_AREA)[y0:y1, x0:x1].astype(np.float32) + 1.0

    def over_skin(image: np.ndarray) -> np.ndarray:
        lips = image[ring]
        redness = lips[:, 0] / np.maximum(lips[:, 1], 1e-3)
        reddest = lips[redness >= np.percentile(redness, LIP_REDDEST)]
        return np.median(reddest, axis=0) / np.maximum(np.median(image[around], axis=0), 1e-3)

    gain = np.clip(over_skin(target) / np.maximum(over_skin(face), 1e-3), *LIP_TINT_RANGE)
    weight = cv2.GaussianBlur(polygon(OUTER_LIP_CONTOUR), (0, 0), 1.0) * drawn
    shading[y0:y1, x0:x1] *= 1.0 + weight[..., None] * (gain - 1.0)


def _relight_closed_lips(shading: np.ndarray, crop: np.ndarray, target: np.ndarray, moved: np.ndarray, uv: np.ndarray,
                         rendered: np.ndarray, source: Mesh3dSource) -> None:
    """Give the re-lit face's closed lips (``shading``, S/2 x S/2, in place) the target's
    light across its lips (``mesh3d_lip_light``): the target read in its own lip geometry,
    the face in the ``moved`` mesh's."""
    albedo = source.albedo_image()

    def at(image: np.ndarray, points: np.ndarray) -> np.ndarray:
        coords = points.astype(np.float32).reshape(-1, 1, 2)
        return cv2.remap(image, coords[..., 0], coords[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)

    def target_lightness(points: np.ndarray) -> np.ndarray:  # half-resolution pixels read in the crop
        return at(crop, points * 2.0 + 0.5).reshape(-1, 3).astype(np.float32).mean(1) + 1.0

    def face_lightness(points: np.ndarray) -> np.ndarray:
        return _relit_face_at(points, uv, albedo, shading).mean(1)

    relight_closed_lips(shading, target_lightness, face_lightness,
                        LipGeometry(target[:, :2] * 0.5 - 0.25), LipGeometry(moved[:, :2] * 0.5 - 0.25), rendered)


def _eye_gain(crop: np.ndarray, target: np.ndarray, moved: np.ndarray, uv: np.ndarray, rendered: np.ndarray,
              source: Mesh3dSource, occluded: np.ndarray | None, shading: np.ndarray) -> np.ndarray | None:
    """The gain that gives the source's eyes drawn in the re-lit face (``shading``, S/2 x
    S/2) the light of the target's own eyes (``mesh3d_eye_light``), None where none can be
    read: the target's read in the crop where nothing is kept in front of it, the face's in
    the ``moved`` mesh."""
    albedo = source.albedo_image()
    half = uv.shape[0]

    def target_colour(points: np.ndarray) -> np.ndarray:
        cols = np.clip(np.round(points[:, 0]).astype(np.int64), 0, crop.shape[1] - 1)
        rows = np.clip(np.round(points[:, 1]).astype(np.int64), 0, crop.shape[0] - 1)
        values = crop[rows, cols].astype(np.float32) / 255.0
        if occluded is not None:
            values[occluded[rows, cols] > 0.5] = np.nan
        return values

    def face_colour(points: np.ndarray) -> np.ndarray:
        at = (points * 0.5 - 0.25).astype(np.float32)  # half-resolution pixels
        values = _relit_face_at(at, uv, albedo, shading)
        cols = np.clip(np.round(at[:, 0]).astype(np.int64), 0, half - 1)
        rows = np.clip(np.round(at[:, 1]).astype(np.int64), 0, half - 1)
        values[~rendered[rows, cols]] = np.nan
        return values

    return eye_gain(target_colour, face_colour, target, moved)


def _relit_face_at(points: np.ndarray, uv: np.ndarray, albedo: np.ndarray, shading: np.ndarray) -> np.ndarray:
    """(N, 3) the re-lit face (the albedo read through ``uv``, times ``shading``) at (N, 2)
    half-resolution points, bilinear: what the graph draws there, read on the host."""
    at = points.astype(np.float32).reshape(-1, 1, 2)
    texel = cv2.remap(uv, at[..., 0], at[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE) * albedo.shape[0] - 0.5
    colour = cv2.remap(albedo, texel[..., 0], texel[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    light = cv2.remap(shading, at[..., 0], at[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return (colour * light).reshape(-1, 3)


def _masked_low_pass(image: np.ndarray, weight: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """(the Gaussian low pass of ``image`` over ``weight``, that low pass of ``weight``)."""
    support = cv2.GaussianBlur(weight, (0, 0), sigma)
    low = cv2.GaussianBlur(image * weight[..., None], (0, 0), sigma).reshape(image.shape) / np.maximum(support, 1e-6)[..., None]
    return low, support


def _light_layers(target: np.ndarray, lightness: np.ndarray, skin: np.ndarray, sigma: float) -> np.ndarray | None:
    """(L, H, W) soft memberships (summing to 1 per pixel) of the target's light levels (None
    where no skin shows): the log lightness of what has the skin's colour in
    linear light (a shadow dims skin and keeps its colour; sunglasses, a beard, a microphone
    do not) filled over the rest, median-filtered (a cast shadow's edge stays a step;
    glasses frames, strands and wrinkles, narrower than the window, go), cut into levels
    ``LIGHT_LAYER_STEP`` apart."""
    skin = skin * _skin_coloured(target, skin)
    if float(skin.max(initial=0.0)) <= 0.5:
        return None
    logs = np.log(lightness).astype(np.float32)
    filled, _ = _masked_low_pass(logs[..., None], skin, sigma)
    guide = skin * logs + (1.0 - skin) * filled[..., 0]
    guide = cv2.medianBlur(np.ascontiguousarray(guide, dtype=np.float32), 5)
    # levels on a fixed lattice over all of the guide: a pixel's memberships change smoothly
    # with its light, and a level no pixel belongs to changes nothing (no popping in video)
    step = LIGHT_LAYER_STEP
    centres = np.arange(np.floor(guide.min() / step), np.ceil(guide.max() / step) + 1) * step
    members = np.clip(1.0 - np.abs(guide[None] - centres.astype(np.float32)[:, None, None]) / step, 0.0, 1.0)
    return np.ascontiguousarray(members[members.reshape(len(centres), -1).any(1)], dtype=np.float32)


def _skin_coloured(target: np.ndarray, skin: np.ndarray) -> np.ndarray:
    """(H, W) in [0, 1]: how near each pixel's chromaticity in linear light is to the skin's
    (its median over ``skin``, read on every other pixel), whatever its lightness. The
    channels are handled one by one: NumPy reduces over a 3-long last axis slowly."""
    linear = np.where(target <= 0.04045, target / 12.92, ((target + 0.055) / 1.055) ** 2.4).astype(np.float32) + 1e-4
    red, green, blue = linear[..., 0], linear[..., 1], linear[..., 2]
    chroma = cv2.log(linear / (red + green + blue)[..., None])
    seen = skin[::2, ::2] > 0.5
    if seen.sum() < 8:
        return np.ones_like(skin)
    offset = np.abs(chroma - np.median(chroma[::2, ::2][seen], axis=0))
    distance = np.maximum(np.maximum(offset[..., 0], offset[..., 1]), offset[..., 2])
    return np.clip((LIGHT_LAYER_CHROMA[1] - distance) / (LIGHT_LAYER_CHROMA[1] - LIGHT_LAYER_CHROMA[0]), 0.0, 1.0)


def _layered_low_pass(image: np.ndarray, weight: np.ndarray, sigma: float, layers: np.ndarray | None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``_masked_low_pass`` that does not average across the target's light levels (a
    bilateral grid over ``layers``): a hat brim's or a window's hard shadow keeps its edge.
    A level with little skin of its own near a pixel leans on the plain low pass. The
    levels' sums are low-passed together (one image, a channel per sum) at half the
    resolution: they are smooth, and each level's sharp outline is applied at full size.
    The arithmetic runs on whole planes (NumPy is slow over short trailing axes)."""
    plain, support = _masked_low_pass(image, weight, sigma)
    if layers is None:
        return plain, support
    height, width, channels = image.shape
    levels = len(layers)
    member_weights = weight[None] * layers  # (L, H, W)
    planes = np.ascontiguousarray(image.transpose(2, 0, 1))  # (C, H, W)
    sums = np.concatenate([(planes[None] * member_weights[:, None]).reshape(levels * channels, height, width), member_weights])
    small = cv2.resize(np.ascontiguousarray(sums.transpose(1, 2, 0)), (max(width // 2, 1), max(height // 2, 1)),
                       interpolation=cv2.INTER_AREA)
    blurred = cv2.resize(cv2.GaussianBlur(small, (0, 0), sigma / 2.0), (width, height), interpolation=cv2.INTER_LINEAR)
    blurred = np.ascontiguousarray(blurred.reshape(height, width, -1).transpose(2, 0, 1))
    own_support = blurred[levels * channels:, None]  # (L, 1, H, W)
    own = blurred[: levels * channels].reshape(levels, channels, height, width) / np.maximum(own_support, 1e-6)
    lean = LIGHT_LAYER_LEAN / (own_support + LIGHT_LAYER_LEAN)
    plain_planes = np.ascontiguousarray(plain.transpose(2, 0, 1))[None]
    low = (layers[:, None] * (own + lean * (plain_planes - own))).sum(0)
    return np.ascontiguousarray(low.transpose(1, 2, 0), dtype=np.float32), support


def _near_own_low_pass(lightness: np.ndarray, weight: np.ndarray, sigma: float, layers: np.ndarray | None = None
                       ) -> np.ndarray:
    """(H, W) in [0, 1]: 1 where a pixel's ``lightness`` is near its low pass over ``weight``,
    0 far from it (a robust weight for the tone: dark frames, hair, glare)."""
    lightness = np.log(lightness)
    low, _ = _layered_low_pass(lightness[..., None], weight, sigma, layers)
    deviation = np.abs(lightness - low[..., 0])
    return np.clip((TONE_OUTLIER[1] - deviation) / (TONE_OUTLIER[1] - TONE_OUTLIER[0]), 0.0, 1.0)


def merge_sources(sources: Sequence[Mesh3dSource]) -> Mesh3dSource:
    """One source from several photos of one person: per texel, the albedos averaged by how
    well each photo saw that texel and how much it is skin there (a left and a right
    profile fill each other's far side; a frontal photo wins where it sees best), the
    mirrored side and a smooth fill where none saw it; the shape averaged per vertex by
    how well each photo saw it (identity from all); the lighting of the photo that saw the
    most; the photos' resolution (``photo_texels``) averaged by how much each saw. One
    source comes back as it is."""
    if not sources:
        raise ValueError("no sources to merge")
    if len(sources) == 1:
        return sources[0]
    size = sources[0].albedo.shape[-1]
    if any(source.albedo.shape[-1] != size for source in sources):
        raise ValueError("sources of different texture sizes cannot be merged")
    weights = np.stack([np.ones((size, size), np.float32) if s.weight is None else s.weight for s in sources])
    albedos = np.stack([s.albedo.transpose(1, 2, 0) for s in sources])
    total = weights.sum(0)
    merged = (albedos * weights[..., None]).sum(0) / np.maximum(total, 1e-6)[..., None]
    filled = symmetric_fill(merged, np.clip(total, 0.0, 1.0))
    # the shape: per vertex, by the weight of the texel it lies on
    at = np.clip(np.round(canonical_mesh().uv * size - 0.5).astype(np.int64), 0, size - 1)
    vertex_weights = weights[:, at[:, 1], at[:, 0]] + 1e-3  # (N, 468): a vertex no photo saw takes the mean
    shape = (np.stack([s.shape for s in sources]) * vertex_weights[..., None]).sum(0) / vertex_weights.sum(0)[:, None]
    seen = weights.sum((1, 2))
    best = int(np.argmax(seen))
    known = np.array([s.photo_texels > 0.0 for s in sources]) * seen
    photo_texels = float(np.array([s.photo_texels for s in sources]) @ known / known.sum()) if known.sum() > 0 else 0.0
    return Mesh3dSource(
        albedo=np.ascontiguousarray(filled.transpose(2, 0, 1), dtype=np.float32),
        lighting=sources[best].lighting,
        shape=shape.astype(np.float32),
        weight=np.clip(total, 0.0, 1.0).astype(np.float32),
        photo_texels=photo_texels,
    )


def _without_eyewear(filled: np.ndarray, blended: np.ndarray) -> np.ndarray:
    """``filled`` with glasses taken out: they are looked for (and removed) in ``blended``,
    the albedo with both sides mixed wherever the other is seen (a frame is the same on
    both sides, so the mix holds it as well as either side, and a faint one better), and
    what the removal changed there replaces ``filled``'s texels, softly."""
    cleaned, found = remove_eyewear(blended)
    if not found:
        return filled
    changed = (np.abs(cleaned - blended).max(2) > 1e-4).astype(np.float32)
    weight = np.clip(cv2.GaussianBlur(cv2.dilate(changed, np.ones((3, 3), np.uint8)), (0, 0), 1.0) * 1.5, 0.0, 1.0)[..., None]
    return (filled * (1.0 - weight) + cleaned * weight).astype(np.float32)


def symmetric_fill(albedo: np.ndarray, visibility: np.ndarray, confidence: np.ndarray | None = None,
                   blend_sides: bool = False) -> np.ndarray:
    """(T, T, 3) the albedo mixed with the mirrored side's as far as that is better seen
    (soft symmetry), and the smooth average of the trusted texels around what neither side
    shows (past the cheeks, hair at the temples). ``visibility`` (T, T): how well the photo
    saw each texel (cos^2: grazing texels are filled); ``confidence`` (T, T) in [0, 1], if
    given: how much each texel is the face's own skin (what is not counts for little);
    ``blend_sides``: the other side mixed in wherever it is seen, not only where it is seen
    better (what glasses are looked for in)."""
    confidence = np.ones_like(visibility) if confidence is None else confidence
    # how well each texel's value is known (cos^2 units): its own view, and the mirrored side's
    evidence = visibility * confidence
    evidence = evidence + evidence[:, ::-1] * (1.0 - evidence) ** 2 * MIRROR_WEIGHT
    seen = np.clip((evidence - TRUSTED_WEIGHT[0]) / (TRUSTED_WEIGHT[1] - TRUSTED_WEIGHT[0]), 0.0, 1.0)
    # what it is mixed from: the other side only where that is better seen (a turned photo's far side);
    # two equally seen sides of a frontal photo are two different skins, which averaged lose their detail
    own = visibility * confidence
    other = own[:, ::-1]
    better = 1.0 if blend_sides else np.clip((other - own) / BETTER_SEEN, 0.0, 1.0)
    mirrored = other * better * (1.0 - own) ** 2 * MIRROR_WEIGHT
    combined = np.maximum(own + mirrored, 1e-6)
    other_side = albedo[:, ::-1] if blend_sides else albedo[:, ::-1] * _side_level_ratio(albedo, own)
    mixed = (albedo * own[..., None] + other_side * mirrored[..., None]) / combined[..., None]
    # trusted as far as seen, and as far as what the mix came from is the face's own skin
    mixed_confidence = np.where(own + mirrored > 1e-6, (own * confidence + mirrored * confidence[:, ::-1]) / combined, confidence)
    return push_pull_fill(mixed, seen * mixed_confidence)


def _side_level_ratio(albedo: np.ndarray, own: np.ndarray) -> np.ndarray:
    """(T, T, 3) what the mirrored side's albedo is multiplied by where it fills in: this
    side's smooth level over the other side's there (each low-passed over its own trusted
    texels, holes bridged from around them), so a strand's or a shadow's patch takes the
    other side's detail at this side's lightness and colour. The two sides of a face are
    not equally lit or coloured (the light model leaves some of it), and a patch copied as
    it was showed as a pale or dark flat shape with an edge. Where this side has little
    trusted skin near (a turned photo's far side) the other side is taken as it is."""
    size = albedo.shape[0]
    sigma = SIDE_LEVEL_SIGMA * size

    def level(image: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return cv2.GaussianBlur(push_pull_fill(image, weight), (0, 0), sigma)

    this_side = level(albedo, own)
    other_side = level(np.ascontiguousarray(albedo[:, ::-1]), np.ascontiguousarray(own[:, ::-1]))
    ratio = np.clip(this_side / np.maximum(other_side, 1e-3), *SIDE_LEVEL_RANGE)
    near = cv2.GaussianBlur(own, (0, 0), 2.0 * sigma)
    trust = np.clip(near / SIDE_LEVEL_SUPPORT, 0.0, 1.0)[..., None]
    return (1.0 + trust * (ratio - 1.0)).astype(np.float32)


def texels_per_pixel(points: np.ndarray, texture_size: int) -> float:
    """How many albedo texels one photo pixel spans (linear), over the triangles the photo
    sees face-on: the square root of their area in UV texels over their area in pixels."""
    mesh = canonical_mesh()
    image_area = signed_areas(points, mesh.triangles)
    uv_area = np.abs(signed_areas(mesh.uv.astype(np.float64) * texture_size, mesh.triangles))
    facing = image_area < 0  # the same winding test the render culls back faces by
    seen = np.abs(image_area[facing]).sum()
    return float(np.sqrt(uv_area[facing].sum() / seen)) if seen > 0 else 0.0


def _weighted_middle_mean(values: np.ndarray, weights: np.ndarray) -> float:
    """The weighted mean of the middle half of ``values`` (counted by ``weights``): as
    robust as their median to a minority of outliers, and smooth from frame to frame (a
    median jumps from one sample to the next)."""
    order = np.argsort(values)
    counted = weights[order] / max(float(weights.sum()), 1e-12)
    above = np.cumsum(counted)  # the share of the weight up to and including each value
    middle = counted * ((above > MIDDLE[0]) & (above - counted < MIDDLE[1]))
    return float(values[order] @ middle / max(float(middle.sum()), 1e-12))


@lru_cache(maxsize=1)
def _uv_columns() -> np.ndarray:
    """(2, 468) the canonical mesh's UV coordinates, one contiguous row per axis."""
    return np.ascontiguousarray(canonical_mesh().uv.T)


def _grazing_outliers(albedo: np.ndarray, visibility: np.ndarray) -> np.ndarray:
    """(P,) in [0, 1]: how much a texel is not the face's skin though the unwrap would keep it.
    Where a frontal photo sees the face at a grazing angle (past the cheeks, at the temples
    and jaw) its texels are often hair, the background or the shadow beside the face; a
    turned target shows that part of the mesh wide open on its near cheek, as dark stripes
    (on the yaw sweep they cost dlib's HOG detector the face at -39..-45 deg). Such texels
    differ from the well-seen skin by far more than skin varies, so at grazing angles
    those count for less and the mirrored side or the fill takes over."""
    seen = albedo[visibility > 0.5]
    if len(seen) < MIN_SKIN_TEXELS:
        return np.zeros(len(albedo), np.float32)
    logs = np.log(np.maximum(albedo, 1e-3))
    deviation = np.abs(logs - np.median(np.log(np.maximum(seen, 1e-3)), axis=0)).max(1)
    outlier = np.clip((deviation - GRAZING_OUTLIER[0]) / (GRAZING_OUTLIER[1] - GRAZING_OUTLIER[0]), 0.0, 1.0)
    grazing = np.clip((GRAZING_BELOW - visibility) / GRAZING_BELOW, 0.0, 1.0)
    return (outlier * grazing).astype(np.float32)


def _with_mouth_interior(crop: np.ndarray, points: np.ndarray, rendered: np.ndarray, holes: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray]:
    """(rendered, holes) at half resolution with the target's whole mouth opening kept: its
    teeth and the dark gap, found by colour inside its lips and joined to the landmarks'
    opening. A smiling mouth's inner-lip landmarks sit on its teeth, not on the lips' inner
    edge, so the opening they outline misses the teeth's upper rows, which the source's lips
    then covered (a band of lip over the teeth). Teeth are brighter than the lips and no
    redder than the skin; the gap far darker than the lips."""
    half = holes.shape[0]
    small = points[:, :2] * 0.5 - 0.25
    lips = small[list(OUTER_LIP_CONTOUR)]
    centre = lips.mean(0)
    x0, y0 = np.maximum(np.floor(lips.min(0)).astype(int) - 1, 0)
    x1, y1 = np.minimum(np.ceil(lips.max(0)).astype(int) + 2, half)
    if x1 - x0 < 4 or y1 - y0 < 3:
        return rendered, holes

    def polygon(ids: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
        mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
        corners = centre + (small[list(ids)] - centre) * scale - (x0, y0)
        cv2.fillPoly(mask, [np.round(corners * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)
        return mask > 0

    box = cv2.resize(crop, (half, half), interpolation=cv2.INTER_AREA)[y0:y1, x0:x1].astype(np.float32) + 1.0
    light = box.mean(2)
    redness = box[..., 0] / (0.5 * (box[..., 1] + box[..., 2]))
    ring = polygon(OUTER_LIP_CONTOUR) & ~polygon(OUTER_LIP_CONTOUR, MOUTH_LIPS_RING)  # lips, whatever the landmarks
    opening = polygon(INNER_LIP_CONTOUR)
    if ring.sum() < 8 or not opening.any():
        return rendered, holes
    lip_light, lip_red = float(np.median(light[ring])), float(np.median(redness[ring]))
    teeth = (light > MOUTH_TEETH[0] * lip_light) & (redness < 1.0 + MOUTH_TEETH[1] * (lip_red - 1.0))
    inside = (teeth | (light < MOUTH_GAP * lip_light)) & polygon(OUTER_LIP_CONTOUR, MOUTH_LIPS_RING)
    _, labels = cv2.connectedComponents((inside | opening).astype(np.uint8), connectivity=8)
    joined = np.isin(labels, np.unique(labels[opening])) & (labels > 0)
    grown = holes.copy()
    grown[y0:y1, x0:x1] |= joined & (rendered[y0:y1, x0:x1] | holes[y0:y1, x0:x1])
    return rendered & ~grown, grown


def _mouth_opening(points: np.ndarray) -> float:
    """The gap between the inner lips' centres over the mouth's width (0: closed)."""
    return float(np.linalg.norm(points[13, :2] - points[14, :2]) / max(np.linalg.norm(points[61, :2] - points[291, :2]), 1e-6))


@lru_cache(maxsize=2)
def _features_mask(size: int, contours: tuple[tuple[int, ...], ...] = (OUTER_LIP_CONTOUR, LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR)
                   ) -> np.ndarray:
    """(T, T, 1) the eyes and lips (or the ``contours`` given), grown and softened: their colour is their own."""
    features = np.zeros((size, size), np.float32)
    for contour in contours:
        features = np.maximum(features, uv_polygon_mask(size, contour))
    return cv2.GaussianBlur(cv2.dilate(features, np.ones((5, 5), np.uint8)), (0, 0), 2.0)[..., None]


def _redness(chroma: np.ndarray) -> np.ndarray:
    return chroma[..., 0] - 0.5 * (chroma[..., 1] + chroma[..., 2])


def _smooth_skin_chroma(albedo: np.ndarray) -> np.ndarray:
    """The albedo's colour (chromaticity) low-passed over the skin, its luminance untouched:
    skin's colour varies slowly, while a photo's folds and wrinkles carry saturated shadow
    colour (light scattered under the skin) that a colour match towards the target's skin
    turns into red stripes. The finest detail then takes the colour skin's own detail has
    for its darkness (``coloured_like_skin``): smoothed alone, wrinkles were grey lines.
    (Pulling dark texels all the way to the skin's colour took dlib's HOG detector further
    off the turned faces of the yaw sweep: not done.)
    The eyes and their lids are never far redder than the skin around them: red lid rims
    seen through a pair of glasses' lenses, tired or flash-red eyes read as bloodshot rims
    on the target, not as who the person is."""
    luminance = albedo.mean(2, keepdims=True) + 1e-3
    chroma = albedo / luminance
    skin = 1.0 - _features_mask(albedo.shape[0])
    sigma = CHROMA_SIGMA * albedo.shape[0]  # the lips' red counts for nothing in the skin's low-passed colour
    smooth = cv2.GaussianBlur(chroma * skin, (0, 0), sigma) / np.maximum(cv2.GaussianBlur(skin, (0, 0), sigma), 1e-3)[..., None]
    mixed = chroma + skin * CHROMA_SMOOTHING * (smooth - chroma)
    features = (OUTER_LIP_CONTOUR, LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, LEFT_BROW, RIGHT_BROW)
    plain_skin = 1.0 - _features_mask(albedo.shape[0], features)[..., 0]
    mixed = coloured_like_skin(mixed, luminance[..., 0], plain_skin)
    eyes = _features_mask(albedo.shape[0], (LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR))
    excess = np.maximum(_redness(mixed) - _redness(smooth), 0.0)[..., None]
    kept = EYE_RED_OVER_SKIN * np.tanh(excess / EYE_RED_OVER_SKIN)  # a brown iris (~0.4) stays much as it is
    mixed = mixed + eyes * (excess - kept) * np.array([-2.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0], np.float32)  # lightness kept
    return np.clip(luminance * mixed, 0.0, ALBEDO_MAX).astype(np.float32)


@lru_cache(maxsize=2)
def _eye_texels(size: int) -> np.ndarray:
    """(P,) per texel of the ``size`` atlas: how much it lies in an eye opening."""
    eyes = np.maximum(uv_polygon_mask(size, LEFT_EYE_CONTOUR), uv_polygon_mask(size, RIGHT_EYE_CONTOUR))
    return eyes[uv_atlas(size).texels]


def _sample_crop(crop, at: np.ndarray) -> np.ndarray:
    """(P, 3) colours in [0, 1] of the crop (NumPy or CuPy, (S, S, 3) uint8) at (P, 2)
    positions, nearest pixel: the lighting fit needs a few hundred values, not a warp."""
    size = crop.shape[0]
    cols = np.clip(np.round(at[:, 0]).astype(np.int64), 0, size - 1)
    rows = np.clip(np.round(at[:, 1]).astype(np.int64), 0, size - 1)
    xp = array_module(crop)
    return to_host(crop[xp.asarray(rows), xp.asarray(cols)]).astype(np.float32) / 255.0



def _sample_image(image: np.ndarray, at: np.ndarray) -> np.ndarray:
    """(P, 3) colours in [0, 1] of a host image at (P, 2) positions, bilinear (remap wants
    maps under 32767 a side, so the points go in rows of 256)."""
    count = len(at)
    rows = -(-count // 256)
    maps = np.full((rows * 256, 2), -1.0, dtype=np.float32)
    maps[:count] = at
    maps = maps.reshape(rows, 256, 2)
    sampled = cv2.remap(image, maps[..., 0], maps[..., 1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return sampled.reshape(-1, 3)[:count].astype(np.float32) / 255.0
