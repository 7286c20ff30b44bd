"""``swapcast bench occlusion``: things in front of the face stay in front.

The occlusion set: the pose set's moving sample faces (a pan and a zoom, see ``pose_set``)
with real objects from the installed wheels pasted over them -- scikit-image's coffee cup
and a grey grille ball on a dark handle (a microphone) in front of the mouth, matplotlib's
gift box over a cheek, and glasses frames (two rims and a bridge). Each object moves with
the face (held by the person) and comes in after the first quarter of the clip, as a hand
does, so a tracker has seen the face bare first. Per clip, swapped with the occlusion
estimate on and off (``SwapOptions.occlusion``), over the frames the object is there:

- **kept**: of the object's pixels inside the face region, the fraction the swap left
  as they were (every channel within ``KEPT_LEVEL``) -- the target is >= 95 %;
- **identity**: the dlib rule (d(out, source) < 0.6 and < d(out, target), the target
  being the occluded input frame) every ``IDENTITY_EVERY`` frames, on the whole output
  face: keeping the object itself costs it (a kept cup hides the mouth dlib reads);
- **identity outside the object**: the same rule on the output with the object's own
  pixels (its true mask, grown by ``OUTSIDE_MARGIN`` of the face's width for the keep
  mask's soft edge) taken from the same frame swapped with occlusion off: what is left
  is the face outside the object, so only face pixels wrongly kept cost it;
- **edge flicker**: the frames mapped into the object's own coordinates (there it stands
  still), the mean frame-to-frame change of the output in a band around the object's
  edge, over the input's own change there: 1.0 = the swap adds no flicker at the edge;
- **ms per frame**: ``FrameSwapper.process`` as live sessions run it.

The full run adds the pose set's motion clips with nothing in front (``+bare``): the
identity rule there, on vs off, is what the estimate's false keeps cost a bare face.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from gpu.analysis.identity import SAME_PERSON_DISTANCE, identity_distance
from gpu.analysis.landmarks import FACE_OVAL, LEFT_EYE, RIGHT_EYE
from gpu.engine import FaceEngine, SourceFace
from gpu.options import SwapOptions
from gpu.swappers.mesh3d_geometry import LEFT_BROW, RIGHT_BROW
from gpu.types import Face
from streamer.pipeline.frame_swapper import FrameSwapper
from swapcast.benchmarks.pose_set import MOTIONS as POSE_MOTIONS
from swapcast.benchmarks.pose_set import PEOPLE, PoseClip, person_image, pose_clips
from swapcast.config import Config

OBJECTS = ("cup", "microphone", "gift", "glasses")
MOTIONS = ("pan", "zoom")  # the first motions pose_clips renders
KEPT_LEVEL = 12  # 0..255: an object pixel within this of its input value was kept
KEPT_TARGET = 0.95
IDENTITY_EVERY = 4
EDGE_BAND_PX = 3  # object coordinates: the band reaches this far each side of its edge
OUTSIDE_MARGIN = 0.03  # of the face's width: the object's mask grown this much is 'the object' for identity outside it
# What a person of the set wears in front of the face, drawn by hand over the photo (RGB,
# ``person_image`` pixels): Grace Hopper's glasses -- the dark top bars, the amber rims and
# the bridge, each a polyline or an ellipse with its stroke width. The occlusion estimate
# keeps a face's own glasses in front, so identity "outside what is in front" leaves them
# out as it leaves out a held object.
WORN = {
    "grace_hopper": (
        ("line", ((172, 190), (183, 180), (200, 175), (225, 174), (247, 178)), 12),
        ("line", ((278, 178), (300, 173), (325, 172), (345, 175), (356, 186)), 12),
        ("ellipse", ((214, 201), (34, 28)), 8),
        ("ellipse", ((317, 201), (35, 28)), 8),
        ("line", ((247, 184), (281, 184)), 8),
    ),
}


@dataclass(frozen=True)
class Occluder:
    """An object to hold in front of a face: RGB and alpha (float32 in [0, 1])."""

    name: str
    rgb: np.ndarray
    alpha: np.ndarray
    width: float  # its width as a fraction of the face's width
    anchor: tuple[float, float]  # where its centre sits: (across, down) in face widths from the nose tip


@dataclass
class OccludedClip:
    """A pose clip with an object pasted over the face from ``enters`` on."""

    name: str
    person: str
    frames: list[np.ndarray]
    meshes: list[np.ndarray]
    masks: list[np.ndarray]  # per frame (H, W) float32 alpha of the object in the frame
    placements: list[np.ndarray]  # per frame (2, 3) object patch -> frame
    patch_alpha: np.ndarray  # the object's alpha in patch coordinates
    enters: int
    fps: float
    worn: list[np.ndarray] | None = None  # per frame (H, W) float32: what the face itself wears in front (``WORN``)

    @property
    def bare(self) -> bool:
        """Nothing in front of the face: the estimate's false keeps cost identity here."""
        return not any(mask.any() for mask in self.masks)


@dataclass
class ClipResult:
    clip: str
    occlusion: str
    kept: float | None  # fraction of the object's face-region pixels left as they were; None on a bare face
    identity_passed: int
    identity_scored: int
    to_source: float | None  # mean d(out, source)
    to_target: float | None  # mean d(out, target)
    outside_passed: int  # the identity rule with the object's pixels (and the face's glasses) taken from the occlusion-off output
    outside_to_source: float | None  # mean d(out outside the object, source)
    edge_flicker: float | None  # output's frame-to-frame change at the object's edge over the input's
    ms: float  # mean per frame
    swapped: float | None = None  # share of the object's frames in which the face was swapped (a lost face keeps the object by not being swapped)


# -- the objects ----------------------------------------------------------------------------


@lru_cache(maxsize=1)
def occluders() -> dict[str, Occluder]:
    """The objects, drawn once from images in the installed wheels."""
    import skimage.data

    coffee = skimage.data.coffee()
    cup = np.zeros(coffee.shape[:2], np.uint8)
    cv2.ellipse(cup, (290, 112), (120, 94), 0, 0, 360, 255, -1)  # the rim and the coffee
    cv2.fillPoly(cup, [np.array([[172, 112], [408, 112], [385, 225], [345, 270], [250, 282], [190, 235]], np.int32)], 255)
    cv2.ellipse(cup, (228, 266), (34, 40), 0, 0, 360, 255, -1)  # the handle
    x, y, w, h = cv2.boundingRect(cup)

    gravel = skimage.data.gravel().astype(np.float32)
    size = 200
    mic_alpha = np.zeros((size * 2, size), np.float32)
    cv2.circle(mic_alpha, (size // 2, size // 2), size // 2 - 4, 1.0, -1, cv2.LINE_AA)
    cv2.rectangle(mic_alpha, (size // 2 - 22, size // 2), (size // 2 + 22, 2 * size - 1), 1.0, -1)
    grille = np.repeat(cv2.resize(gravel, (size, size))[..., None], 3, 2) * 0.8 + 30
    handle = np.repeat(cv2.resize(gravel, (size, size))[..., None], 3, 2) * 0.15 + 10
    mic_rgb = np.concatenate([grille, handle]).clip(0, 255).astype(np.uint8)
    cv2.circle(mic_rgb, (size // 2, size // 2), size // 2 - 4, (15, 15, 15), 6, cv2.LINE_AA)

    glasses_alpha = np.zeros((size // 2, size * 2), np.float32)
    for centre in (size // 2, size * 3 // 2):
        cv2.ellipse(glasses_alpha, (centre, size // 4), (84, 40), 0, 0, 360, 1.0, 9, cv2.LINE_AA)
    cv2.line(glasses_alpha, (size // 2 + 84, size // 4 - 6), (size * 3 // 2 - 84, size // 4 - 6), 1.0, 9, cv2.LINE_AA)
    frame_rgb = np.repeat(cv2.resize(gravel, glasses_alpha.shape[::-1])[..., None], 3, 2) * 0.2 + [40, 20, 10]

    import matplotlib

    gift = cv2.imread(str(Path(matplotlib.get_data_path()) / "sample_data" / "Minduka_Present_Blue_Pack.png"), cv2.IMREAD_UNCHANGED)
    gift = cv2.cvtColor(gift, cv2.COLOR_BGRA2RGBA)
    return {
        "cup": Occluder("cup", coffee[y:y + h, x:x + w], cup[y:y + h, x:x + w].astype(np.float32) / 255.0, 0.55, (0.1, 0.3)),
        "microphone": Occluder("microphone", mic_rgb, mic_alpha, 0.3, (0.0, 0.45)),
        "gift": Occluder("gift", gift[..., :3], gift[..., 3].astype(np.float32) / 255.0, 0.5, (0.28, 0.05)),
        "glasses": Occluder("glasses", frame_rgb.clip(0, 255).astype(np.uint8), glasses_alpha, 0.95, (0.0, -0.24)),
    }


def _placement(occluder: Occluder, mesh: np.ndarray, lift: float) -> np.ndarray:
    """(2, 3) patch -> frame: the object scaled to the face's width, turned with the eye
    line, its centre at its anchor (``lift`` face widths lower while it comes in)."""
    left, right = mesh[list(LEFT_EYE)].mean(0), mesh[list(RIGHT_EYE)].mean(0)
    across = (right - left) / max(float(np.linalg.norm(right - left)), 1e-6)
    if across[0] < 0:
        across = -across
    down = np.array([-across[1], across[0]])
    oval = mesh[list(FACE_OVAL)]
    face_width = float(np.ptp(oval @ across))
    centre = mesh[4] + face_width * (occluder.anchor[0] * across + (occluder.anchor[1] + lift) * down)
    height, width = occluder.alpha.shape
    scale = occluder.width * face_width / width
    linear = scale * np.stack([across, down], axis=1)  # columns: patch x, patch y
    return np.concatenate([linear, (centre - linear @ [width / 2, height / 2])[:, None]], axis=1).astype(np.float32)


def occluded_clip(clip: PoseClip, occluder: Occluder, enters: int | None = None, slide: int = 4) -> OccludedClip:
    """``clip`` with ``occluder`` pasted in, sliding up into place over ``slide`` frames
    from frame ``enters`` (default: a quarter in)."""
    enters = len(clip.frames) // 4 if enters is None else enters
    frames, masks, placements = [], [], []
    for index, (frame, mesh) in enumerate(zip(clip.frames, clip.meshes, strict=True)):
        if index < enters:
            frames.append(frame)
            masks.append(np.zeros(frame.shape[:2], np.float32))
            placements.append(np.zeros((2, 3), np.float32))
            continue
        lift = 0.6 * max(0.0, 1.0 - (index - enters) / slide)
        matrix = _placement(occluder, mesh, lift)
        size = (frame.shape[1], frame.shape[0])
        alpha = cv2.warpAffine(occluder.alpha, matrix, size, flags=cv2.INTER_LINEAR)
        rgb = cv2.warpAffine(occluder.rgb, matrix, size, flags=cv2.INTER_LINEAR).astype(np.float32)
        frames.append((frame * (1.0 - alpha[..., None]) + rgb * alpha[..., None] + 0.5).astype(np.uint8))
        masks.append(alpha)
        placements.append(matrix)
    return OccludedClip(f"{clip.name}+{occluder.name}", clip.person, frames, clip.meshes, masks, placements,
                        occluder.alpha, enters, clip.fps, worn_masks(clip.person, clip.meshes, clip.frames[0].shape))


def worn_masks(person: str, meshes: list[np.ndarray], shape: tuple[int, ...]) -> list[np.ndarray] | None:
    """Per frame, what ``person`` wears in front of the face (``WORN``, drawn on the photo)
    where it went in the frame: moved with the eyes, brows and nose bridge (an affine fit
    from the photo's mesh to the frame's, which a yaw sweep's turn bends only a little);
    None for a person who wears nothing."""
    if person not in WORN:
        return None
    from swapcast.benchmarks.pose_set import render_pose_with_mesh

    photo = person_image(person)
    drawn = np.zeros(photo.shape[:2], np.uint8)
    for kind, shape_points, width in WORN[person]:
        if kind == "line":
            cv2.polylines(drawn, [np.array(shape_points, np.int32)], False, 1, width)
        else:
            cv2.ellipse(drawn, shape_points[0], shape_points[1], 0, 0, 360, 1, width)
    photo_mesh = render_pose_with_mesh(photo, 0.0)[1]
    around_eyes = sorted(set(LEFT_EYE) | set(RIGHT_EYE) | set(LEFT_BROW) | set(RIGHT_BROW) | {6, 168, 197})
    masks = []
    for mesh in meshes:
        matrix, _ = cv2.estimateAffine2D(photo_mesh[around_eyes].astype(np.float32), mesh[around_eyes].astype(np.float32),
                                         method=cv2.LMEDS)
        if matrix is None:  # no fit (a degenerate mesh): nothing is known to be worn there
            masks.append(np.zeros(shape[:2], np.float32))
            continue
        masks.append(cv2.warpAffine(drawn.astype(np.float32), matrix, (shape[1], shape[0]), flags=cv2.INTER_LINEAR))
    return masks


def bare_clips(people=PEOPLE, frames: int = 24) -> list[OccludedClip]:
    """The pose set's motion clips with nothing in front: what keeping costs a bare face."""
    return [OccludedClip(f"{clip.name}+bare", clip.person, clip.frames, clip.meshes,
                         [np.zeros(frame.shape[:2], np.float32) for frame in clip.frames],
                         [np.zeros((2, 3), np.float32)] * len(clip.frames), np.zeros((1, 1), np.float32), 0, clip.fps,
                         worn_masks(clip.person, clip.meshes, clip.frames[0].shape))
            for clip in pose_clips(people, frames=frames)]


def occlusion_set(people=PEOPLE, motions=MOTIONS, objects=OBJECTS, frames: int = 24) -> list[OccludedClip]:
    clips = []
    rendered = max(POSE_MOTIONS.index(motion) for motion in motions) + 1  # the pose set renders its motions in order
    for person in people:
        for clip in itertools.islice(pose_clips((person,), frames=frames), rendered):
            if clip.motion in motions:
                clips.extend(occluded_clip(clip, occluders()[name]) for name in objects)
    return clips


# -- measuring ------------------------------------------------------------------------------


def face_region(mesh: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """(H, W) bool: inside the face outline."""
    region = np.zeros(shape[:2], np.uint8)
    cv2.fillConvexPoly(region, np.round(cv2.convexHull(mesh[list(FACE_OVAL)].astype(np.float32))[:, 0]).astype(np.int32), 1)
    return region.astype(bool)


def kept_fraction(clip: OccludedClip, outputs: list[np.ndarray]) -> float:
    """Of the object's pixels inside the face outline (over the frames it is there), the
    fraction every channel of which the swap left within ``KEPT_LEVEL``."""
    kept = total = 0
    for index in range(clip.enters, len(outputs)):
        occluder = (clip.masks[index] >= 0.5) & face_region(clip.meshes[index], outputs[index].shape)
        change = np.abs(outputs[index].astype(np.int16) - clip.frames[index].astype(np.int16)).max(axis=2)
        kept += int((change[occluder] <= KEPT_LEVEL).sum())
        total += int(occluder.sum())
    return kept / total if total else 1.0


def edge_flicker(clip: OccludedClip, outputs: list[np.ndarray]) -> float:
    """Output's mean frame-to-frame change in a band around the object's edge, over the
    input's, both mapped into the object's coordinates (where it stands still); from the
    frame after it settled (``enters`` + the slide)."""
    band = _edge_band(clip.patch_alpha)
    height, width = clip.patch_alpha.shape
    start = clip.enters + 5
    out_changes, in_changes, previous = [], [], None
    for index in range(start, len(outputs)):
        if not clip.masks[index].any():  # gone (the arrivals set takes it away again)
            previous = None
            continue
        inverse = cv2.invertAffineTransform(clip.placements[index])
        face = cv2.warpAffine(face_region(clip.meshes[index], outputs[index].shape).astype(np.uint8), inverse, (width, height)) > 0
        pair = [cv2.warpAffine(image, inverse, (width, height), flags=cv2.INTER_LINEAR).astype(np.float32)
                for image in (outputs[index], clip.frames[index])]
        if previous is not None and clip.masks[index].any() and clip.masks[index - 1].any():
            region = band & face & previous[2]
            if region.any():
                out_changes.append(float(np.abs(pair[0] - previous[0])[region].mean()))
                in_changes.append(float(np.abs(pair[1] - previous[1])[region].mean()))
        previous = (*pair, face)
    return float(np.mean(out_changes) / max(np.mean(in_changes), 1e-6)) if in_changes else 1.0


def _edge_band(alpha: np.ndarray) -> np.ndarray:
    solid = (alpha >= 0.5).astype(np.uint8)
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * EDGE_BAND_PX + 1,) * 2)
    return (cv2.dilate(solid, kernel) - cv2.erode(solid, kernel)).astype(bool)


def swap_clip(engine: FaceEngine, source: SourceFace, clip: OccludedClip, options: SwapOptions,
              swapped: list[bool] | None = None) -> tuple[list[np.ndarray], float]:
    """The clip through one stream's FrameSwapper: output frames, mean ms per frame;
    ``swapped`` (when given) gets, per frame, whether a face was swapped in it."""
    swapper = FrameSwapper(engine, source, options)
    outputs, spent = [], 0.0
    try:
        for index, frame in enumerate(clip.frames):
            output = frame.copy()
            started = time.perf_counter()
            times = swapper.process(output, index / clip.fps)
            spent += time.perf_counter() - started
            outputs.append(output)
            if swapped is not None:
                swapped.append(times.faces_swapped > 0)
    finally:
        swapper.close()
    return outputs, spent * 1000.0 / len(clip.frames)


def occlusion_cost(engine: FaceEngine, source: SourceFace, options: SwapOptions, clip: list[np.ndarray]) -> dict[str, Any]:
    """Per-frame cost of the occlusion estimate (``bench engine``): the clip through two
    streams, occlusion on and off, frame by frame in turn (load from elsewhere falls on
    both alike); median ms of the whole frame and of the prepare stage (where it runs)."""
    swappers = {mode: FrameSwapper(engine, source, replace(options, occlusion=mode)) for mode in ("auto", "off")}
    totals: dict[str, list[float]] = {mode: [] for mode in swappers}
    prepares: dict[str, list[float]] = {mode: [] for mode in swappers}
    try:
        for index, frame in enumerate(clip):
            for mode, swapper in swappers.items():
                started = time.perf_counter()
                times = swapper.process(frame.copy(), index / 30.0)
                totals[mode].append((time.perf_counter() - started) * 1000.0)
                prepares[mode].append(times.prepare)
    finally:
        for swapper in swappers.values():
            swapper.close()
    warm = slice(min(5, len(clip) - 1), None)
    cost = {mode: {"median_ms": float(np.median(totals[mode][warm])), "prepare_ms": float(np.median(prepares[mode][warm]))}
            for mode in swappers}
    print(f"occlusion estimate: median {cost['auto']['median_ms']:.1f} ms/frame on vs {cost['off']['median_ms']:.1f} off "
          f"(prepare stage {cost['auto']['prepare_ms']:.1f} vs {cost['off']['prepare_ms']:.1f} ms), frames in turn")
    return cost


def outside_object(clip: OccludedClip, outputs: list[np.ndarray], off: list[np.ndarray]) -> list[np.ndarray]:
    """``outputs`` with the object's pixels and what the face wears (its glasses; the masks
    grown by ``OUTSIDE_MARGIN`` of the face's width, softly) taken from ``off`` (the same
    frames swapped with occlusion off): the face outside what is in front as this swap left
    it, that as if never kept."""
    blended = []
    for index, (output, plain) in enumerate(zip(outputs, off, strict=True)):
        alpha = clip.masks[index] if clip.worn is None else np.maximum(clip.masks[index], clip.worn[index])
        if not alpha.any():
            blended.append(output)
            continue
        reach = max(1, int(round(OUTSIDE_MARGIN * float(np.ptp(clip.meshes[index][list(FACE_OVAL), 0])))))
        grown = cv2.dilate(alpha, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * reach + 1,) * 2))[..., None]
        blended.append((output * (1.0 - grown) + plain * grown + 0.5).astype(np.uint8))
    return blended


def identity_scores(engine: FaceEngine, clip: OccludedClip, outputs: list[np.ndarray], source_identity: np.ndarray
                    ) -> list[tuple[float, float]]:
    """(d(out, source), d(out, occluded target)) every ``IDENTITY_EVERY`` frames the object is there."""
    from gpu.analysis.landmarks import five_points

    scores = []
    for index in range(clip.enters, len(outputs), IDENTITY_EVERY):
        mesh = clip.meshes[index]
        face = Face(box=np.concatenate([mesh.min(0), mesh.max(0)]).astype(np.float32), kps=five_points(mesh), mesh=mesh)
        out = engine.identity(outputs[index], face)
        target = engine.identity(clip.frames[index], face)
        scores.append((identity_distance(out, source_identity), identity_distance(out, target)))
    return scores


def run_occlusion_benchmark(engine: FaceEngine, clips: list[OccludedClip], report: Path | None = None,
                            out=None, mode: str = "auto") -> dict[str, Any]:
    """Every clip swapped with the occlusion estimate on (``mode``: auto, or objects: not
    the glasses a face wears) and off; prints the table (to ``out``, default stdout),
    returns the numbers (``summary`` keyed by mode)."""
    out = out or sys.stdout
    sources: dict[str, tuple[SourceFace, np.ndarray]] = {}
    results: list[ClipResult] = []
    for clip in clips:
        other = next(person for person in PEOPLE if person != clip.person)
        if other not in sources:
            photo = person_image(other)
            source = engine.register_source(photo, label=other)
            sources[other] = (source, source.identity)
        source, source_identity = sources[other]
        frames_swapped: dict[str, list[bool]] = {each: [] for each in (mode, "off")}
        swapped = {each: swap_clip(engine, source, clip, replace(SwapOptions(), occlusion=each), frames_swapped[each])
                   for each in (mode, "off")}
        for each, (outputs, ms) in swapped.items():
            results.append(score_clip(engine, clip, each, outputs, swapped["off"][0], source_identity, ms, frames_swapped[each]))
        pictures = [swapped[each][0][-1] for each in (mode, "off")]
        if report is not None:
            _write_picture(report, clip, pictures)
    summary = _summary(results, (mode, "off"))
    _print_table(results, summary, out, mode)
    if report is not None:
        report.mkdir(parents=True, exist_ok=True)
        (report / "occlusion.json").write_text(json.dumps({"clips": [asdict(r) for r in results], "summary": summary}, indent=2))
    return {"clips": results, "summary": summary}


def score_clip(engine: FaceEngine, clip: OccludedClip, mode: str, outputs: list[np.ndarray], off: list[np.ndarray],
               source_identity: np.ndarray, ms: float, swapped: list[bool] | None = None) -> ClipResult:
    """One clip's numbers for ``outputs``; ``off``: the same clip swapped with occlusion off;
    ``swapped``: per frame, whether a face was swapped."""
    present = [index for index, mask in enumerate(clip.masks) if mask.any()]
    scores = identity_scores(engine, clip, outputs, source_identity)
    outside = scores if clip.bare and clip.worn is None else \
        identity_scores(engine, clip, outside_object(clip, outputs, off), source_identity)
    return ClipResult(
        clip=clip.name, occlusion=mode, kept=None if clip.bare else kept_fraction(clip, outputs), identity_passed=_passes(scores),
        identity_scored=len(scores), to_source=_mean([s for s, _ in scores]), to_target=_mean([t for _, t in scores]),
        outside_passed=_passes(outside), outside_to_source=_mean([s for s, _ in outside]),
        edge_flicker=None if clip.bare else edge_flicker(clip, outputs), ms=ms,
        swapped=None if swapped is None or not present else float(np.mean([swapped[index] for index in present])),
    )


def _passes(scores: list[tuple[float, float]]) -> int:
    return sum(1 for s, t in scores if s < SAME_PERSON_DISTANCE and s < t)


def run_occlusion_command(config: Config, frames: int = 24, quick: bool = False, report: str | None = None,
                          as_json: bool = False, mode: str = "auto", arrivals: str | None = None) -> int:
    """``swapcast bench occlusion``: the set (``quick``: one face, the pan, two objects)
    through the configured engine, and (not ``quick``) the bare pose clips; or, with
    ``arrivals`` (tuning, held-out or all), that half of the arrivals set
    (``swapcast.benchmarks.arrivals``); 0 when the kept fraction reaches the target."""
    if frames < 8:
        print("bench occlusion: --frames must be at least 8 (the object comes in a quarter of the way)", file=sys.stderr)
        return 2
    if arrivals is not None:
        from swapcast.benchmarks.arrivals import HALVES, arrival_clip

        cases = [case for half, chosen in HALVES.items() if arrivals in (half, "all") for case in chosen]
        clips = [arrival_clip(case) for case in (cases[:2] if quick else cases)]
    elif quick:
        clips = occlusion_set(people=PEOPLE[:1], motions=MOTIONS[:1], objects=("cup", "gift"), frames=frames)
    else:
        clips = occlusion_set(frames=frames) + bare_clips(frames=frames)
    engine = FaceEngine(config.engine.settings())
    try:
        outcome = run_occlusion_benchmark(engine, clips, report=Path(report) if report else None, mode=mode)
    finally:
        engine.close()
    if as_json:
        print(json.dumps(outcome["summary"], indent=2))
    kept = outcome["summary"][mode]["kept"]
    return 0 if kept is not None and kept >= KEPT_TARGET else 1


def _summary(results: list[ClipResult], modes: tuple[str, ...]) -> dict[str, Any]:
    summary = {}
    for mode in modes:
        rows = [r for r in results if r.occlusion == mode and r.kept is not None]
        bare = [r for r in results if r.occlusion == mode and r.kept is None]
        scored, bare_scored = sum(r.identity_scored for r in rows), sum(r.identity_scored for r in bare)
        summary[mode] = {
            "kept": _mean([r.kept for r in rows]), "kept_min": min((r.kept for r in rows), default=None),
            "identity_pass": sum(r.identity_passed for r in rows) / scored if scored else None,
            "identity_pass_outside": sum(r.outside_passed for r in rows) / scored if scored else None,
            "bare_identity_pass": sum(r.identity_passed for r in bare) / bare_scored if bare_scored else None,
            "bare_identity_pass_outside": sum(r.outside_passed for r in bare) / bare_scored if bare_scored else None,
            "to_source": _mean([r.to_source for r in rows if r.to_source is not None]),
            "to_target": _mean([r.to_target for r in rows if r.to_target is not None]),
            "edge_flicker": _mean([r.edge_flicker for r in rows]), "ms": _mean([r.ms for r in rows]),
            "swapped": _mean([r.swapped for r in rows]),
            "kept_and_swapped": _mean([r.kept * r.swapped for r in rows if r.swapped is not None]),
        }
    return summary


def _print_table(results: list[ClipResult], summary: dict[str, Any], out, on: str) -> None:
    def cells(row) -> str:
        def num(value, digits=2):
            return "-" if value is None else f"{value:.{digits}f}"
        kept = "-" if row["kept"] is None else f"{100 * row['kept']:.1f}%"
        def share(key) -> str:
            return "-" if row.get(key) is None else f"{100 * row[key]:.0f}%"
        return (f"{kept:>7} {share('swapped'):>5} {share('identity_pass'):>6} {share('identity_pass_outside'):>6} "
                f"{num(row['to_source']):>6} {num(row['to_target']):>6} {num(row['edge_flicker']):>6} {num(row['ms'], 1):>6}")

    header = f"{'kept':>7} {'swap':>5} {'id ok':>6} {'id out':>6} {'d src':>6} {'d tgt':>6} {'edge':>6} {'ms':>6}"
    print(f"{'clip':34} | occlusion {on + ':':9}{header} | off: {header}", file=out)
    by_clip: dict[str, dict[str, ClipResult]] = {}
    for r in results:
        by_clip.setdefault(r.clip, {})[r.occlusion] = r
    for name, modes in by_clip.items():
        rows = {mode: {"kept": r.kept, "identity_pass": r.identity_passed / r.identity_scored if r.identity_scored else None,
                       "identity_pass_outside": r.outside_passed / r.identity_scored if r.identity_scored else None,
                       "to_source": r.to_source, "to_target": r.to_target, "edge_flicker": r.edge_flicker, "ms": r.ms,
                       "swapped": r.swapped}
                for mode, r in modes.items()}
        print(f"{name:34} | {'':19}{cells(rows[on])} | {'':5}{cells(rows['off'])}", file=out)
    print(f"{'all':34} | {'':19}{cells(summary[on])} | {'':5}{cells(summary['off'])}", file=out)
    if summary[on]["bare_identity_pass"] is not None:
        print(f"identity rule on bare faces (+bare, nothing held in front): {100 * summary[on]['bare_identity_pass']:.0f}% on, "
              f"{100 * summary['off']['bare_identity_pass']:.0f}% off; outside the glasses a face wears: "
              f"{100 * summary[on]['bare_identity_pass_outside']:.0f}% on, "
              f"{100 * summary['off']['bare_identity_pass_outside']:.0f}% off", file=out)
    kept = summary[on]["kept"]
    verdict = "holds" if kept is not None and kept >= KEPT_TARGET else "misses"
    print(f"occluder pixels kept with occlusion {on}: {100 * (kept or 0):.1f}% ({verdict} the {100 * KEPT_TARGET:.0f}% target); "
          "id ok = identity rule on the whole output face, id out = outside the object (its pixels from the "
          "occlusion-off output); swap = share of the object's frames with the face swapped; edge = output/input frame-to-frame change at the object's edge (1.0 = no added flicker)",
          file=out)


def _write_picture(report: Path, clip: OccludedClip, outputs: list[np.ndarray]) -> None:
    """Input | occlusion on | off, the last frame, cropped around the face."""
    from streamer.media.images import write_image

    mesh = clip.meshes[-1]
    x0, y0 = np.maximum(mesh.min(0) - 40, 0).astype(int)
    x1, y1 = (mesh.max(0) + 40).astype(int)
    tiles = [image[y0:y1, x0:x1] for image in (clip.frames[-1], *outputs)]
    report.mkdir(parents=True, exist_ok=True)
    write_image(report / f"{clip.name.replace('/', '_').replace('+', '_')}.png", np.hstack(tiles))


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None
