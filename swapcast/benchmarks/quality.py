"""``swapcast bench quality``: how well each swapper holds up on the pose set, side by side.

Every person's photos (and their mirrored and turned variants) go onto every still and
clip of the *other* person in the pose set (see ``pose_set``): turned, tilted, small,
relit and moving faces. Per target face and swapper it records:

- **detected**: the engine's still analysis (or, for clips, a per-stream tracker) found
  the face where the ground truth says it is -- the recall;
- **identity**: dlib distances from the output face to the source person (the descriptor of
  their own photo, whichever variant was the source) and to the target, both taken at the
  ground-truth face so a detector miss does not hide a bad output; the rule passes when
  d(output, source) < 0.6 and < d(output, target). With one photo per person these read
  better than on held-out faces: the frontal source is the very photo the source identity
  comes from (the mirrored, turned and blurry/dim variants are less so);
- **dlib finds it**: dlib's HOG detector still finds a face there in the output (and, for
  comparison, in the target: HOG's frontal model itself gives up on strong turns);
- **flicker** (clips): mean frame-to-frame change inside the face in the output, over the
  same in the target -- 1.0 means the swap adds no temporal noise of its own;
- **ms per frame**: the still path (``swapcast swap``) for stills, the per-stream path
  (``FrameSwapper.process``, as live sessions run it) for clips.

A mapping part (``swapcast.benchmarks.mapping``) runs the people set: two and three people,
each mapped by a reference photo to someone else's face; per person, the share of their
swapped frames with their own source, frames with another's, coverage and identity.

Pictures (target | each swapper | source, cropped around the face) and ``quality.json``
with every number go into ``--report DIR``."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from gpu.analysis.identity import SAME_PERSON_DISTANCE, identity_distance
from gpu.engine import FaceEngine, SourceFace
from gpu.errors import SwapcastError
from gpu.types import Face
from streamer.media.images import write_image
from streamer.pipeline.frame_swapper import FrameSwapper
from swapcast.benchmarks.mapping import print_mapping, run_mapping
from swapcast.benchmarks.pose_set import (
    MOTIONS,
    PEOPLE,
    PoseClip,
    PoseSample,
    head_model,
    person_image,
    pose_clips,
    pose_set,
    source_images,
)
from swapcast.config import Config
from swapcast.progress import ProgressBar

DEFAULT_SWAPPERS = ("mesh", "mesh3d")
SUBSETS = ("yaw", "roll", "scale", "light", *MOTIONS, "mapping")  # ``only``: still kinds, clip motions, the mapping part
CHANGED_LEVEL = 1.0  # mean absolute change (0..255) inside the face that counts as swapped
IDENTITY_EVERY = 4  # clips: identity on every 4th frame (dlib costs ~60 ms a face)
HOG_FACE_PX = 110  # dlib's HOG model wants faces of ~80 px and up: crops are scaled to this
PICTURE_HEIGHT = 256


@dataclass
class FaceResult:
    """One swapper's output on one target face (a still, or one frame of a clip)."""

    swapper: str
    source: str
    target: str
    kind: str  # yaw, roll, scale, light, or video
    group: str  # the table row this counts in, e.g. "yaw +30", "video yaw_sweep"
    yaw: float
    detected: bool
    swapped: bool
    output_to_source: float | None
    output_to_target: float | None
    passed: bool | None  # the identity rule; None where identity was not measured (clip frames between samples)
    dlib_target: bool
    dlib_output: bool
    ms: float  # the whole frame: analysis or tracking, then the swap
    swap_ms: float  # the swap alone: prepare, run, paste


def run_quality_benchmark(
    config: Config,
    report_dir: str | None,
    swappers: tuple[str, ...] = DEFAULT_SWAPPERS,
    quick: bool = False,
    as_json: bool = False,
    progress: bool = True,
    only: tuple[str, ...] = (),
) -> int:
    report = Path(report_dir) if report_dir else None
    if report is not None:
        report.mkdir(parents=True, exist_ok=True)
    engines, unavailable = _engines(config, swappers)
    for name, reason in unavailable.items():
        print(f"swapper {name}: not available, left out ({reason})")
    if not engines:
        raise SwapcastError(f"none of the swappers {', '.join(swappers)} is available here")
    print("building the pose set ...", file=sys.stderr, flush=True)
    unknown = set(only) - set(SUBSETS)
    if unknown:
        raise SwapcastError(f"unknown pose set part(s) {', '.join(sorted(unknown))}; choose from {', '.join(SUBSETS)}")
    pose_parts = not only or set(only) - {"mapping"}
    stills = [s for s in pose_set(quick=quick) if not only or s.kind in only] if pose_parts else []
    clips = [c for c in pose_clips(quick=quick) if not only or c.motion in only] if pose_parts else []
    sources = {person: source_images(person, quick=quick) for person in PEOPLE} if pose_parts else {}
    scorer = Scorer(next(iter(engines.values())))
    options = replace(config.swap.options(), smoothing=False)
    video_options = config.swap.options()
    pairs = [(s, t) for t in stills for s in sources if s != t.person for _ in sources[s]]
    frames = sum(len(c.frames) for c in clips) * (len(PEOPLE) - 1)
    total = (len(pairs) + frames) * len(engines)
    print(f"quality: swappers {', '.join(engines)}; {len(stills)} stills and {len(clips)} clips of {', '.join(PEOPLE)}; "
          f"sources: {', '.join(n for v in sources.values() for n in v)}; {total} swaps in all")

    results: list[FaceResult] = []
    outputs: dict[tuple[str, str], np.ndarray] = {}  # (swapper, target) -> output from the person's own photo
    clip_outputs: dict[tuple[str, str], list[np.ndarray]] = {}
    flicker: dict[str, dict[str, float]] = {}
    done = 0
    with ProgressBar("bench quality", enabled=progress) as bar:
        for swapper_name, engine in engines.items():
            registered = {
                (person, label): engine.register_source(image, label=label)
                for person, variants in sources.items()
                for label, image in variants.items()
            }
            for (person, label), source in registered.items():
                still_swapper = FrameSwapper(engine, source, options)  # one per source, as ``swapcast swap`` runs
                for target in stills:
                    if target.person == person:
                        continue
                    output, result = _swap_still(still_swapper, scorer, label, scorer.person_identity(person), target)
                    results.append(result)
                    if label == person:
                        outputs[(swapper_name, target.name)] = output
                    done += 1
                    bar.update(done, total)
                still_swapper.close()
            for clip in clips:
                for person in PEOPLE:
                    if person == clip.person:
                        continue
                    clip_results, swapped, ratio = _swap_clip(engine, scorer, swapper_name, person,
                                                              registered[(person, person)], clip, video_options)
                    results.extend(clip_results)
                    clip_outputs[(swapper_name, clip.name)] = swapped
                    flicker.setdefault(swapper_name, {})[clip.name] = ratio
                    done += len(clip.frames)
                    bar.update(done, total)

    names = list(engines)
    summary = _summary(results, flicker, names)
    if results:
        _print_table(summary, names)
        for line in _verdicts(summary, names):
            print(line)
    mapping = None
    if not only or "mapping" in only:
        print("building the people set and mapping ...", file=sys.stderr, flush=True)
        mapping = run_mapping(engines, quick=quick, options=video_options, report=report)
        print_mapping(mapping)
    data = {
        "swappers": names,
        "unavailable": unavailable,
        "quick": quick,
        "only": list(only),
        "people": list(PEOPLE),
        "sources": {person: list(variants) for person, variants in sources.items()},
        "summary": summary,
        "flicker": flicker,
        "faces": [asdict(r) for r in results],
        "mapping": mapping,
    }
    if report is not None:
        _write_pictures(report, stills, clips, sources, outputs, clip_outputs, names)
        (report / "quality.json").write_text(json.dumps(data, indent=2))
        print(f"report: {report / 'quality.json'} (+ side-by-side pictures: target | {' | '.join(names)} | source)")
    if as_json:
        print(json.dumps(data))
    return 0


def _engines(config: Config, names: tuple[str, ...]) -> tuple[dict[str, FaceEngine], dict[str, str]]:
    """One engine per swapper asked for; a swapper this build or machine lacks is left out
    with the reason (the engine falls back to ``mesh`` for names it does not know)."""
    engines, unavailable = {}, {}
    for name in dict.fromkeys(names):
        try:
            engine = FaceEngine(replace(config.engine.settings(), swapper=name))
        except (SwapcastError, ValueError, ImportError) as exc:
            unavailable[name] = str(exc)
            continue
        if engine.swapper.name != name:
            unavailable[name] = f"this build has no swapper {name!r} (the engine made {engine.swapper.name!r})"
            engine.close()
            continue
        engines[name] = engine
    return engines, unavailable


class Scorer:
    """Ground-truth face matching, identity and dlib's HOG detector, shared by all swappers."""

    def __init__(self, engine: FaceEngine) -> None:
        import dlib

        self.engine = engine
        self._hog = dlib.get_frontal_face_detector()
        self._target_identity: dict[str, np.ndarray] = {}
        self._detected: dict[str, bool] = {}
        self._dlib_target: dict[str, bool] = {}

    def identity(self, image: np.ndarray, mesh: np.ndarray) -> np.ndarray:
        """dlib descriptor of the face at ``mesh``, turned upright first: dlib's 68-point fit
        starts from an upright face and misfits a strongly tilted one, which would score the
        measurement rather than the swap."""
        upright, mesh = _upright(image, mesh)
        return self.engine.identity(upright, _ground_truth_face(mesh))

    def person_identity(self, person: str) -> np.ndarray:
        """Who ``person`` is: the descriptor of their own photo. Every source variant (mirrored,
        turned, blurry and dim) is scored against it, not against its own pixels."""
        key = f"person:{person}"
        if key not in self._target_identity:
            photo = person_image(person)
            self._target_identity[key] = self.identity(photo, head_model(photo).points[:, :2])
        return self._target_identity[key]

    def target_identity(self, key: str, image: np.ndarray, mesh: np.ndarray) -> np.ndarray:
        if key not in self._target_identity:
            self._target_identity[key] = self.identity(image, mesh)
        return self._target_identity[key]

    def detected(self, key: str, image: np.ndarray, box: np.ndarray) -> bool:
        """Did the engine's still analysis find a face (with its mesh) at the true place?"""
        if key not in self._detected:
            self._detected[key] = any(f.mesh is not None and _matches(f.box, box) for f in self.engine.analyse_image(image))
        return self._detected[key]

    def found(self, image: np.ndarray, box: np.ndarray) -> bool:
        """Does the engine's still analysis find a face (with its mesh) at ``box`` in ``image`` (not cached: an output)?"""
        return any(f.mesh is not None and _matches(f.box, box) for f in self.engine.analyse_image(image))

    def dlib_target(self, key: str, image: np.ndarray, box: np.ndarray) -> bool:
        if key not in self._dlib_target:
            self._dlib_target[key] = self.dlib_finds(image, box)
        return self._dlib_target[key]

    def dlib_finds(self, image: np.ndarray, box: np.ndarray) -> bool:
        """dlib's HOG detector finds a face at ``box`` (on a crop scaled so the face is ~110 px)."""
        crop, scale, origin = _face_crop(image, box, 2.0, HOG_FACE_PX / max(box[2] - box[0], 1.0))
        local = (np.asarray(box, np.float32).reshape(2, 2) - origin) * scale
        centre = local.mean(0)
        for found in self._hog(crop, 0):
            if found.left() <= centre[0] <= found.right() and found.top() <= centre[1] <= found.bottom():
                return True
        return False


def _swap_still(swapper: FrameSwapper, scorer: Scorer, source_name: str, reference: np.ndarray,
                target: PoseSample) -> tuple[np.ndarray, FaceResult]:
    output = target.image.copy()
    started = time.perf_counter()
    times = swapper.process_still(output)
    ms = (time.perf_counter() - started) * 1000
    box = target.face_box
    identity = scorer.identity(output, target.mesh)
    to_source = identity_distance(identity, reference)
    to_target = identity_distance(identity, scorer.target_identity(target.name, target.image, target.mesh))
    return output, FaceResult(
        swapper=swapper.engine.swapper.name, source=source_name, target=target.name, kind=target.kind, group=_group(target), yaw=target.yaw,
        detected=scorer.detected(target.name, target.image, box),
        swapped=_changed(target.image, output, box),
        output_to_source=to_source, output_to_target=to_target, passed=passes(to_source, to_target),
        dlib_target=scorer.dlib_target(target.name, target.image, box),
        dlib_output=scorer.dlib_finds(output, box),
        ms=ms, swap_ms=times.prepare + times.run + times.paste,
    )


def _swap_clip(engine: FaceEngine, scorer: Scorer, swapper_name: str, source_name: str, source: SourceFace,
               clip: PoseClip, options) -> tuple[list[FaceResult], list[np.ndarray], float]:
    """The clip through one stream's FrameSwapper (tracker, smoothing, batcher) as a live
    session runs it; per frame results, the output frames and the flicker ratio."""
    tracker = engine.tracker(smoothing=options.smoothing)
    found = []
    for index, frame in enumerate(clip.frames):
        faces = tracker.process(frame, index / clip.fps)
        found.append(any(_matches(f.box, clip.face_box(index)) for f in faces))
    tracker.close()
    swapper = FrameSwapper(engine, source, options)
    outputs, results = [], []
    try:
        for index, frame in enumerate(clip.frames):
            output = frame.copy()
            started = time.perf_counter()
            times = swapper.process(output, index / clip.fps)
            ms = (time.perf_counter() - started) * 1000
            outputs.append(output)
            box = clip.face_box(index)
            to_source = to_target = None
            if index % IDENTITY_EVERY == 0:
                identity = scorer.identity(output, clip.meshes[index])
                to_source = identity_distance(identity, scorer.person_identity(source_name))
                key = f"{clip.name}#{index}"
                to_target = identity_distance(identity, scorer.target_identity(key, frame, clip.meshes[index]))
            results.append(FaceResult(
                swapper=swapper_name, source=source_name, target=f"{clip.name}#{index}", kind="video",
                group=f"video {clip.motion}", yaw=clip.yaws[index] if clip.yaws else 0.0,
                detected=found[index], swapped=_changed(frame, output, box),
                output_to_source=to_source, output_to_target=to_target,
                passed=passes(to_source, to_target) if to_source is not None else None,
                dlib_target=scorer.dlib_target(f"{clip.name}#{index}", frame, box) if index % IDENTITY_EVERY == 0 else False,
                dlib_output=scorer.dlib_finds(output, box) if index % IDENTITY_EVERY == 0 else False,
                ms=ms, swap_ms=times.prepare + times.run + times.paste,
            ))
    finally:
        swapper.close()
    return results, outputs, _flicker_ratio(clip, outputs)


def _flicker_ratio(clip: PoseClip, outputs: list[np.ndarray]) -> float:
    """Mean frame-to-frame change inside the face, output over target (1.0 = no added flicker)."""
    changes_out, changes_in = [], []
    for index in range(1, len(outputs)):
        box = np.concatenate([np.minimum(clip.face_box(index - 1)[:2], clip.face_box(index)[:2]),
                              np.maximum(clip.face_box(index - 1)[2:], clip.face_box(index)[2:])])
        x0, y0, x1, y1 = _clip_box(box, outputs[index].shape)
        for frames, changes in ((outputs, changes_out), (clip.frames, changes_in)):
            a = frames[index - 1][y0:y1, x0:x1].astype(np.float32)
            b = frames[index][y0:y1, x0:x1].astype(np.float32)
            changes.append(float(np.abs(b - a).mean()))
    return float(np.mean(changes_out) / max(np.mean(changes_in), 1e-6)) if changes_in else 1.0


def _group(target: PoseSample) -> str:
    if target.kind == "yaw":
        return f"yaw {int(target.yaw):+d}"
    if target.kind == "roll":
        return f"roll {int(target.roll):+d}" + (f" yaw {int(target.yaw):+d}" if target.yaw else "")
    if target.kind == "scale":
        return f"width {int(round(target.face_width))}" if target.face_width < 300 else "full frame"
    return f"light {target.light}" + (f" yaw {int(target.yaw):+d}" if target.yaw else "")


def passes(to_source: float | None, to_target: float | None) -> bool:
    return to_source is not None and to_target is not None and to_source < SAME_PERSON_DISTANCE and to_source < to_target


def _matches(found: np.ndarray, truth: np.ndarray) -> bool:
    """A detection is the true face when its centre lies in the true box and they overlap."""
    centre = (np.asarray(found[:2]) + np.asarray(found[2:])) / 2
    inside = truth[0] <= centre[0] <= truth[2] and truth[1] <= centre[1] <= truth[3]
    return bool(inside and _iou(found, truth) >= 0.25)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return float(w * h / union) if union > 0 else 0.0


def _changed(before: np.ndarray, after: np.ndarray, box: np.ndarray) -> bool:
    x0, y0, x1, y1 = _clip_box(box, before.shape)
    diff = np.abs(after[y0:y1, x0:x1].astype(np.int16) - before[y0:y1, x0:x1].astype(np.int16))
    return bool(diff.size and diff.mean() > CHANGED_LEVEL)


def _clip_box(box: np.ndarray, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    height, width = shape[:2]
    x0, y0 = max(0, int(box[0])), max(0, int(box[1]))
    x1, y1 = min(width, int(np.ceil(box[2])) + 1), min(height, int(np.ceil(box[3])) + 1)
    return x0, y0, x1, y1


def _ground_truth_face(mesh: np.ndarray) -> Face:
    from gpu.analysis.landmarks import five_points

    box = np.concatenate([mesh.min(0), mesh.max(0)]).astype(np.float32)
    return Face(box=box, kps=five_points(mesh), mesh=mesh.astype(np.float32))


def _upright(image: np.ndarray, mesh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``image`` rotated about the face so its eye line is level, and the mesh with it."""
    from gpu.analysis.landmarks import LEFT_EYE, RIGHT_EYE

    left, right = mesh[list(LEFT_EYE)].mean(0), mesh[list(RIGHT_EYE)].mean(0)
    angle = float(np.degrees(np.arctan2(right[1] - left[1], right[0] - left[0])))
    if abs(angle) < 5.0:
        return image, mesh
    centre = (mesh.min(0) + mesh.max(0)) / 2
    matrix = cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), angle, 1.0)
    rotated = cv2.warpAffine(image, matrix, (image.shape[1], image.shape[0]), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return rotated, (mesh @ matrix[:, :2].T + matrix[:, 2]).astype(np.float32)


def _face_crop(image: np.ndarray, box: np.ndarray, grow: float, scale: float) -> tuple[np.ndarray, float, np.ndarray]:
    """A square crop ``grow`` times the face box around it, resized by ``scale``:
    (crop, scale, crop origin in the image)."""
    centre = (np.asarray(box[:2]) + np.asarray(box[2:])) / 2
    half = grow * max(box[2] - box[0], box[3] - box[1]) / 2
    x0, y0 = int(max(0, centre[0] - half)), int(max(0, centre[1] - half))
    x1, y1 = int(min(image.shape[1], centre[0] + half)), int(min(image.shape[0], centre[1] + half))
    crop = image[y0:y1, x0:x1]
    size = (max(1, int(round(crop.shape[1] * scale))), max(1, int(round(crop.shape[0] * scale))))
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    return np.ascontiguousarray(cv2.resize(crop, size, interpolation=interpolation)), scale, np.array([x0, y0], np.float32)


# -- the table -------------------------------------------------------------------------------------


def _summary(results: list[FaceResult], flicker: dict[str, dict[str, float]], names: list[str]) -> dict[str, Any]:
    """Per swapper: per table row (group), per kind and overall."""
    summary: dict[str, Any] = {}
    for name in names:
        mine = [r for r in results if r.swapper == name]
        rows: dict[str, Any] = {}
        for group in dict.fromkeys(r.group for r in mine):
            rows[group] = _aggregate([r for r in mine if r.group == group])
            if group.startswith("video "):
                motion = group.removeprefix("video ")
                ratios = [v for k, v in flicker.get(name, {}).items() if k.endswith("/" + motion)]
                rows[group]["flicker"] = float(np.mean(ratios)) if ratios else None
        kinds = {kind: _aggregate([r for r in mine if r.kind == kind]) for kind in dict.fromkeys(r.kind for r in mine)}
        if "video" in kinds:
            kinds["video"]["flicker"] = float(np.mean(list(flicker[name].values()))) if flicker.get(name) else None
        up_to_45 = [r for r in mine if abs(r.yaw) <= 45]  # clip frames too (the yaw sweep stays within 45)
        summary[name] = {
            "rows": rows,
            "kinds": kinds,
            "stills": _aggregate([r for r in mine if r.kind != "video"]),
            "up_to_45": _aggregate(up_to_45),
            "all": _aggregate(mine),
        }
    return summary


def _aggregate(rows: list[FaceResult]) -> dict[str, Any]:
    scored = [r for r in rows if r.passed is not None]
    hog_scored = [r for r in rows if r.kind != "video" or r.passed is not None]
    lost = [r for r in hog_scored if r.dlib_target and not r.dlib_output]
    return {
        "faces": len(rows),
        "pass_rate": _mean([r.passed for r in scored]),
        "mean_output_to_source": _mean([r.output_to_source for r in scored]),
        "mean_output_to_target": _mean([r.output_to_target for r in scored]),
        "recall": _mean([r.detected for r in rows]),
        "swapped": _mean([r.swapped for r in rows]),
        "dlib_finds_output": _mean([r.dlib_output for r in hog_scored]),
        "dlib_finds_target": _mean([r.dlib_target for r in hog_scored]),
        "lost_by_dlib": len(lost),
        "ms_per_frame": float(np.median([r.ms for r in rows])) if rows else None,
        "swap_ms_per_frame": float(np.median([r.swap_ms for r in rows])) if rows else None,
    }


def _mean(values: list) -> float | None:
    values = [float(v) for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _print_table(summary: dict[str, Any], names: list[str]) -> None:
    width = 50
    print()
    print(f"{'':<22}{'n':>4}  " + "  ".join(f"{name:<{width}}" for name in names))
    header = f"{'pass':>6} {'d(o,s)':>6} {'recall':>6} {'dlib o/t':>9} {'flick':>6} {'ms all/swap':>12}"
    print(f"{'':<22}{'':>4}  " + "  ".join(f"{header:<{width}}" for _ in names))
    first = summary[names[0]]
    groups = list(dict.fromkeys(g for name in names for g in summary[name]["rows"]))
    for group in groups:
        count = first["rows"].get(group, {}).get("faces", 0)
        print(f"{group:<22}{count:>4}  " + "  ".join(f"{_cells(summary[n]['rows'].get(group)):<{width}}" for n in names))
    print("-" * (28 + (width + 2) * len(names)))
    for label, key in (("|yaw| <= 45 (+ clips)", "up_to_45"), ("all stills", "stills"), ("all (stills + clips)", "all")):
        print(f"{label:<22}{first[key]['faces']:>4}  " + "  ".join(f"{_cells(summary[n][key]):<{width}}" for n in names))
    print("pass: identity rule d(out,src) < 0.6 and < d(out,tgt); d(o,s): mean d(out,src); recall: face detected "
          "where it is; dlib o/t: dlib's HOG finds the face in output / target; flick: clip flicker, output over target; "
          "ms: median per frame, all (analysis/tracking + swap) / the swap alone")
    print()


def _cells(row: dict[str, Any] | None) -> str:
    if not row:
        return "n/a"

    def pct(value: float | None) -> str:
        return f"{100 * value:5.0f}%" if value is not None else "    - "

    def num(value: float | None, digits: int = 2) -> str:
        return f"{value:6.{digits}f}" if value is not None else "     -"

    def ms(value: float | None) -> str:
        return f"{value:.0f}" if value is not None else "-"

    dlib = f"{pct(row['dlib_finds_output']).strip()}/{pct(row['dlib_finds_target']).strip()}"
    return (f"{pct(row['pass_rate'])} {num(row['mean_output_to_source'])} {pct(row['recall'])} {dlib:>9} "
            f"{num(row.get('flicker'))} {ms(row['ms_per_frame']):>7}/{ms(row['swap_ms_per_frame']):<4}")


def _verdicts(summary: dict[str, Any], names: list[str]) -> list[str]:
    """The issue's bar, per swapper: to +-45 degrees every face detected and swapped, the
    identity rule on >= 90 % of faces, and no face dlib found in the target lost."""
    lines = []
    for name in names:
        row = summary[name]["up_to_45"]
        checks = [
            ("every face to +-45 deg detected", row["recall"] is not None and row["recall"] >= 1.0),
            ("identity rule on >= 90%", row["pass_rate"] is not None and row["pass_rate"] >= 0.9),
            ("no face lost (dlib) to +-45 deg", row["lost_by_dlib"] == 0),
        ]
        lines.append(f"{name}: " + "; ".join(f"{label} -> {'PASS' if ok else 'FAIL'}" for label, ok in checks))
    return lines


# -- pictures --------------------------------------------------------------------------------------


def _write_pictures(report: Path, stills: list[PoseSample], clips: list[PoseClip], sources: dict[str, dict[str, np.ndarray]],
                    outputs: dict[tuple[str, str], np.ndarray], clip_outputs: dict[tuple[str, str], list[np.ndarray]],
                    names: list[str]) -> None:
    """target | each swapper | source, cropped around the face, one picture per target; a
    few frames of each clip the same way."""
    for target in stills:
        source = _other(target.person)
        row = [target.image] + [outputs[(n, target.name)] for n in names]
        tiles = [_face_tile(image, target.face_box) for image in row]
        photo = sources[source][source]
        tiles.append(_face_tile(photo, _photo_box(photo)))
        write_image(report / f"{_file_name(target.name)}.png", _label(np.hstack(tiles), ["target", *names, "source"]))
    for clip in clips:
        picks = np.linspace(0, len(clip.frames) - 1, min(4, len(clip.frames))).astype(int)
        rows = []
        for index in picks:
            box = clip.face_box(int(index))
            rows.append(np.hstack([_face_tile(clip.frames[index], box)]
                                  + [_face_tile(clip_outputs[(n, clip.name)][index], box) for n in names]))
        write_image(report / f"{_file_name(clip.name)}.png", _label(np.vstack(rows), ["target", *names]))


def _other(person: str) -> str:
    return next(p for p in PEOPLE if p != person)


def _photo_box(photo: np.ndarray) -> np.ndarray:
    mesh = head_model(photo).points[:, :2]
    return np.concatenate([mesh.min(0), mesh.max(0)])


def _face_tile(image: np.ndarray, box: np.ndarray) -> np.ndarray:
    """A square around the face, 1.8 times its box, at ``PICTURE_HEIGHT`` (black past the frame)."""
    centre = (np.asarray(box[:2], np.float64) + np.asarray(box[2:], np.float64)) / 2
    side = 1.8 * max(box[2] - box[0], box[3] - box[1], 1.0)
    scale = PICTURE_HEIGHT / side
    matrix = np.array([[scale, 0, PICTURE_HEIGHT / 2 - scale * centre[0]], [0, scale, PICTURE_HEIGHT / 2 - scale * centre[1]]])
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
    return cv2.warpAffine(image, matrix, (PICTURE_HEIGHT, PICTURE_HEIGHT), flags=interpolation, borderValue=(0, 0, 0))


def _label(picture: np.ndarray, labels: list[str]) -> np.ndarray:
    picture = picture.copy()
    for k, text in enumerate(labels):
        cv2.putText(picture, text, (k * PICTURE_HEIGHT + 6, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.55, (255, 255, 0), 1, cv2.LINE_AA)
    return picture


def _file_name(name: str) -> str:
    return name.replace("/", "_").replace("+", "p").replace("-", "m")
