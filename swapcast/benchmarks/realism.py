"""``swapcast bench quality --realism``: does the swap look real, not like a mask?

On one half of the realism set (``realism_set``: degraded sources, relit, turned, grouped
and moving targets) every source goes onto every target of the other person. Per target
face it records the identity rule (as ``bench quality``), whether the engine still finds
the face in the output (and dlib's HOG detector, where it finds the target's), and these
measures of how the swapped face sits in the target:

- **tone**: the mean CIE76 colour difference between output and target inside the face
  (eyes, brows and mouth left out) after both are low-passed with a Gaussian of 1/8 of the
  face's width -- the swapped skin's tone and light against the target's own (natural
  swaps read ~3-5; a pale or grey mask 8 and up);
- **edge step**: the colour step across the swap's edge: the mean of (output - target) in
  Lab just inside the face outline against just outside it (a seam shows from ~3);
- **shading kept**: how much of the target's low-frequency shading survives: the slope of
  the output's low-passed lightness on the target's over the face (1 = all of it, 0 = a flat
  mask);
- **strands left**: for a source with hair drawn over its face, the share of the skin where
  its swap is darker in fine lightness than the swap of the same person's clean photo by a
  visible step (streaks the hair brought along; 0 = none);
- **detail kept**, **grain** (the skin as fine-grained as the target's), **target detail left**
  (a ghost of the target), **shadow red** (the skin's detail coloured as skin, not grey), **teeth on closed lips**,
  **lip red** and **mouth kept**: what a contact sheet's small tiles hide (``realism_detail``).

With ``--baseline DIR`` the same swaps are also made by the code of another checkout (the
``old`` columns: ``swap_worker`` runs there) and scored the same way, in the same run. Contact
sheets (source | target | old | new, cropped around the face, each tile labelled with its
numbers), the same at full resolution, one picture per case (``realism_fullres``: the face
at its native size, never scaled down) and ``realism.json`` go into ``--report DIR``: look
at them -- a swap a viewer would call a mask fails whatever its numbers say.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from gpu.analysis.identity import identity_distance
from gpu.analysis.landmarks import FACE_OVAL, OUTER_LIPS
from gpu.errors import SwapcastError
from gpu.models.canonical_mesh import LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR
from gpu.swappers.mesh3d_geometry import LEFT_BROW, RIGHT_BROW
from streamer.media.images import write_image
from swapcast.benchmarks.pose_set import PEOPLE, person_image
from swapcast.benchmarks.realism_detail import detail_kept, grain, mouth_report, shadow_red, target_detail_left, too_sharp
from swapcast.benchmarks.realism_fullres import write_fullres
from swapcast.benchmarks.realism_set import (
    _SOURCE_MAKERS,
    HALVES,
    SOURCE_VARIANTS,
    TARGET_VARIANTS,
    RealismClip,
    RealismSource,
    RealismTarget,
    TargetFace,
    realism_clips,
    realism_sources,
    realism_targets,
)
from swapcast.benchmarks.swap_worker import SwapJobs, SwapOutputs, swap_all, swap_in_checkout
from swapcast.config import Config

TONE_BLUR = 1 / 8  # of the face's width: the low pass of the tone and shading measures
TONE_BAD = 8.0  # a tone difference above this reads as a mask
CLIP_EVERY = 4  # clips: the identity and realism measures on every 4th frame
INNER_BAND = (0.78, 0.9)  # of the face outline (scaled about its centre): just inside it ...
OUTER_BAND = (1.04, 1.16)  # ... and just outside it
HAIR_VARIANTS = ("hair_a", "hair_b")  # sources with strands drawn over the face: compared with ...
CLEAN_VARIANT = "photo"  # ... the swap of this variant of the same person (made for that alone where not in the half)
STRANDS_SPAN = 1 / 10  # of the face's width: a difference from the median over this span is a streak, not tone
STRANDS_STEP = 6.0  # CIE L*: a finer difference beyond this is a visible streak
QUICK_CLIP_FRAMES = 8
TILE = 200
ROWS_PER_SHEET = 8


@dataclass
class RealismResult:
    """One swapper's output on one target face."""

    swapper: str  # "new:mesh3d", "old:mesh3d", ...
    source: str
    target: str  # the target image (a clip: clip#frame); group faces: name#face
    source_variant: str
    target_variant: str
    frontal: bool
    output_to_source: float | None
    output_to_target: float | None
    passed: bool
    found: bool  # the engine still finds a face at the true place in the output
    tone: float | None
    edge_step: float | None
    shading_kept: float | None
    ms: float | None
    detail: float | None = None  # fine detail of the output face over the source face's (1: all kept)
    grain: float | None = None  # the output skin's finest detail over the target skin's (1: as grainy; a mask ~0.5)
    target_detail_left: float | None = None  # of the target's own fine detail, how much shows through (0: none)
    shadow_red: float | None = None  # how much redder the output's skin detail gets where darker (real skin ~0.4; grey ~0)
    target_shadow_red: float | None = None  # the same in the target
    teeth_on_closed_lips: float | None = None  # share of a closed target mouth's lips that turned teeth-like
    lip_red: float | None = None  # CIE a* of the output's lips over the skin around them
    target_lip_red: float | None = None  # the same in the target: what the output's lips should come near
    mouth_kept: float | None = None  # CIE76 of an open target mouth's inside, output vs target
    too_sharp: float | None = None  # target pixels of blur the output face lacks against the target's (0: as soft)
    strands_left: float | None = None  # hair sources: share of the skin streaked unlike the clean photo's swap
    hog_found: bool | None = None  # dlib's HOG detector finds the output face (None: it does not find the target's)


# -- measures --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FaceRegions:
    """Masks of one face in its image, from its ground-truth mesh."""

    skin: np.ndarray  # (H, W) float32: inside the outline, eyes, brows and mouth left out
    inner: np.ndarray  # (H, W) bool: skin just inside the outline
    outer: np.ndarray  # (H, W) bool: just outside it
    width: float  # the face's width in pixels


def face_regions(mesh: np.ndarray, shape: tuple[int, ...]) -> FaceRegions:
    height, width = shape[:2]
    face_width = float(np.ptp(mesh[:, 0]))
    outline = mesh[list(FACE_OVAL)].astype(np.float64)
    centre = outline.mean(0)

    def polygon(points: np.ndarray, grow: float = 1.0) -> np.ndarray:
        mask = np.zeros((height, width), np.uint8)
        scaled = centre + (points - centre) * grow
        cv2.fillPoly(mask, [np.round(scaled * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)
        return mask.astype(bool)

    features = np.zeros((height, width), np.uint8)
    for contour in (LEFT_EYE_CONTOUR, RIGHT_EYE_CONTOUR, LEFT_BROW, RIGHT_BROW, OUTER_LIPS):
        points = mesh[list(contour)].astype(np.float64)
        hull = cv2.convexHull(np.round(points * 16).astype(np.int32))
        cv2.fillConvexPoly(features, hull, 1, cv2.LINE_8, shift=4)
    margin = max(1, int(round(0.04 * face_width)))
    features = cv2.dilate(features, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * margin + 1,) * 2)).astype(bool)
    inside = polygon(outline, 0.96)
    skin = inside & ~features
    inner = polygon(outline, INNER_BAND[1]) & ~polygon(outline, INNER_BAND[0]) & ~features
    outer = polygon(outline, OUTER_BAND[1]) & ~polygon(outline, OUTER_BAND[0])
    return FaceRegions(skin.astype(np.float32), inner, outer, face_width)


def _lab(image: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image.astype(np.float32) / 255.0, cv2.COLOR_RGB2LAB)


def _masked_blur(image: np.ndarray, mask: np.ndarray, sigma: float) -> np.ndarray:
    """The Gaussian low pass of ``image`` over ``mask`` alone (what lies outside it does not bleed in)."""
    weight = cv2.GaussianBlur(mask, (0, 0), sigma)
    blurred = cv2.GaussianBlur(image * mask[..., None], (0, 0), sigma).reshape(image.shape)
    return blurred / np.maximum(weight, 1e-6)[..., None]


def tone_difference(output: np.ndarray, target: np.ndarray, regions: FaceRegions) -> float:
    """Mean CIE76 difference of the low-passed skin of ``output`` and ``target``."""
    sigma = TONE_BLUR * regions.width
    difference = _masked_blur(_lab(output), regions.skin, sigma) - _masked_blur(_lab(target), regions.skin, sigma)
    skin = regions.skin > 0
    return float(np.linalg.norm(difference[skin], axis=1).mean()) if skin.any() else float("nan")


def edge_step(output: np.ndarray, target: np.ndarray, regions: FaceRegions) -> float:
    """|mean (output - target) just inside the outline - the same just outside| in Lab (CIE76)."""
    difference = _lab(output) - _lab(target)
    if not regions.inner.any() or not regions.outer.any():
        return float("nan")
    return float(np.linalg.norm(difference[regions.inner].mean(0) - difference[regions.outer].mean(0)))


def strands_left(output: np.ndarray, clean: np.ndarray, regions: FaceRegions) -> float:
    """Share of the skin where ``output`` (a source with dark hair drawn over its face) is
    darker in fine lightness than ``clean`` (the same person's clean photo, same target) by
    more than ``STRANDS_STEP``: the streaks the source's hair left on the target."""
    skin = regions.skin > 0
    if not skin.any():
        return float("nan")
    difference = _lab(output)[..., 0] - _lab(clean)[..., 0]
    # against the local median, not a mean: a streak's own darkness does not spill onto the skin beside it
    size = 2 * max(1, int(round(STRANDS_SPAN * regions.width / 2))) + 1
    local = cv2.medianBlur(np.clip(np.round(difference) + 128, 0, 255).astype(np.uint8), min(size, 255)).astype(np.float32) - 128
    fine = (difference - local)[skin]
    # the two swaps' fine detail differs both ways where they are registered a little apart;
    # the strands drawn (the person's own hair colour) are darker than the skin: only the
    # share darker beyond the share brighter counts
    return float(max((fine < -STRANDS_STEP).mean() - (fine > STRANDS_STEP).mean(), 0.0))


def shading_kept(output: np.ndarray, target: np.ndarray, regions: FaceRegions) -> float:
    """Slope of the output's low-passed lightness on the target's, over the skin."""
    sigma = TONE_BLUR * regions.width
    skin = regions.skin > 0
    if skin.sum() < 16:
        return float("nan")
    lightness_out = _masked_blur(_lab(output)[..., :1], regions.skin, sigma)[..., 0][skin]
    lightness_target = _masked_blur(_lab(target)[..., :1], regions.skin, sigma)[..., 0][skin]
    centred = lightness_target - lightness_target.mean()
    spread = float(centred @ centred)
    if spread < 1e-6:
        return float("nan")
    return float(centred @ (lightness_out - lightness_out.mean()) / spread)


# -- the run ---------------------------------------------------------------------------------------


def run_realism_benchmark(config: Config, report_dir: str | None, half: str = "held", swappers: tuple[str, ...] = ("mesh3d",),
                          baseline: str | None = None, as_json: bool = False, quick: bool = False) -> int:
    """``quick``: one direction, two sources, two targets and a short clip (a smoke run)."""
    if half not in HALVES:
        raise SwapcastError(f"unknown half {half!r}; choose from {', '.join(HALVES)}")
    if baseline is not None and not (Path(baseline) / "gpu" / "engine.py").is_file():
        raise SwapcastError(f"--baseline {baseline}: not a swapcast checkout (no gpu/engine.py there)")
    report = Path(report_dir) if report_dir else None
    if report is not None:
        report.mkdir(parents=True, exist_ok=True)
    print(f"building the realism set ({half} half) ...", file=sys.stderr, flush=True)
    if quick:
        sources = list(realism_sources(half, people=PEOPLE[:1]))[:2]
        targets = list(realism_targets(half, people=PEOPLE[1:2]))[:2]
        clips = list(realism_clips(half, people=PEOPLE[1:2], frames=QUICK_CLIP_FRAMES))
    else:
        sources = list(realism_sources(half))
        targets = list(realism_targets(half))
        clips = list(realism_clips(half))
    jobs = {name: _jobs(name, sources, targets, clips) for name in swappers}
    for person in {s.person for s in sources if s.variant in HAIR_VARIANTS}:
        clean = f"{person}/{CLEAN_VARIANT}"
        if clean not in {s.name for s in sources}:  # swapped only to compare the hair sources with
            for job in jobs.values():
                job.sources[clean] = _SOURCE_MAKERS[CLEAN_VARIANT](person_image(person))
                job.stills += [(clean, t.name, t.image) for t in targets if t.person != person]
    runs: dict[str, SwapOutputs] = {}
    for name in swappers:
        if baseline is not None:
            print(f"swapping with the baseline's {name} ({baseline}) ...", file=sys.stderr, flush=True)
            with tempfile.TemporaryDirectory() as scratch:
                runs[f"old:{name}"] = swap_in_checkout(jobs[name], Path(baseline), Path(scratch))
        print(f"swapping with this checkout's {name} ...", file=sys.stderr, flush=True)
        runs[f"new:{name}"] = swap_all(jobs[name])
    scorer = _scorer(config)
    try:
        results = _score(scorer, runs, sources, targets, clips)
    finally:
        scorer.engine.close()
    names = list(runs)
    summary = {name: _summarise([r for r in results if r.swapper == name]) for name in names}
    _print_summary(summary, names, half)
    data = {
        "half": half,
        "tuned_on": "tune",
        "quick": quick,
        "variants": {"sources": SOURCE_VARIANTS[half], "targets": TARGET_VARIANTS[half]},
        "baseline": baseline,
        "refused": {name: run.refused for name, run in runs.items()},
        "summary": summary,
        "faces": [asdict(r) for r in results],
    }
    if report is not None:
        sheets = _write_sheets(report, names, runs, results, sources, targets, clips)
        fullres = write_fullres(report / "fullres", names, runs, results, sources, targets, clips)
        (report / "realism.json").write_text(json.dumps(data, indent=2))
        print(f"report: {report / 'realism.json'}; contact sheets: {', '.join(str(s) for s in sheets)}; "
              f"full resolution: {len(fullres)} pictures in {report / 'fullres'}")
    if as_json:
        print(json.dumps(data))
    return 0


def _jobs(swapper: str, sources: list[RealismSource], targets: list[RealismTarget], clips: list[RealismClip]) -> SwapJobs:
    jobs = SwapJobs(swapper, {s.name: s.image for s in sources})
    for source in sources:
        jobs.stills += [(source.name, t.name, t.image) for t in targets if t.person != source.person]
        jobs.clips += [(source.name, c.name, c.frames) for c in clips if c.person != source.person]
    return jobs


def _scorer(config: Config):
    from dataclasses import replace

    from gpu.engine import FaceEngine
    from swapcast.benchmarks.quality import Scorer

    return Scorer(FaceEngine(replace(config.engine.settings(), swapper="mesh")))


def _score(scorer, runs: dict[str, SwapOutputs], sources: list[RealismSource], targets: list[RealismTarget],
           clips: list[RealismClip]) -> list[RealismResult]:
    results = []
    by_name = {s.name: s for s in sources}
    source_meshes = {s.name: _face_mesh(s.image) for s in sources}
    for swapper, run in runs.items():
        for (source_name, target_name), output in run.stills.items():
            if source_name not in by_name:  # a clean photo swapped only to compare with
                continue
            source = by_name[source_name]
            clean = run.stills.get((f"{source.person}/{CLEAN_VARIANT}", target_name)) if source.variant in HAIR_VARIANTS else None
            target = next(t for t in targets if t.name == target_name)
            for index, face in enumerate(target.faces):
                key = target_name if len(target.faces) == 1 else f"{target_name}#{index}"
                results.append(_measure(scorer, swapper, source, source_meshes[source_name], key, target.variant,
                                        target.frontal, target.image, output, face, run.ms.get((source_name, target_name)),
                                        clean))
        for (source_name, clip_name), frames in run.clips.items():
            source = by_name[source_name]
            clip = next(c for c in clips if c.name == clip_name)
            for index in range(0, len(frames), CLIP_EVERY):
                results.append(_measure(scorer, swapper, source, source_meshes[source_name], f"{clip_name}#{index}", "clip",
                                        False, clip.frames[index], frames[index], clip.faces[index],
                                        run.ms.get((source_name, clip_name))))
    return results


def _face_mesh(image: np.ndarray) -> np.ndarray | None:
    """(468, 2) the face of a source photo, or None where none is found (then its detail is not measured)."""
    from swapcast.benchmarks.realism_set import _photo_mesh

    try:
        return _photo_mesh(image)
    except SwapcastError:
        return None


def _measure(scorer, swapper: str, source: RealismSource, source_mesh: np.ndarray | None, target_key: str,
             target_variant: str, frontal: bool, target: np.ndarray, output: np.ndarray, face: TargetFace,
             ms: float | None, clean: np.ndarray | None = None) -> RealismResult:
    from swapcast.benchmarks.quality import passes

    identity = scorer.identity(output, face.mesh)
    to_source = identity_distance(identity, scorer.person_identity(source.person))
    to_target = identity_distance(identity, scorer.target_identity(target_key, target, face.mesh))
    regions = face_regions(face.mesh, target.shape)
    mouth = mouth_report(output, target, face.mesh)
    output_shadow_red, target_shadow_red = shadow_red(output, target, face.mesh)
    return RealismResult(
        swapper=swapper, source=source.name, target=target_key, source_variant=source.variant, target_variant=target_variant,
        frontal=frontal, output_to_source=to_source, output_to_target=to_target, passed=passes(to_source, to_target),
        found=scorer.found(output, face.box), tone=tone_difference(output, target, regions),
        edge_step=edge_step(output, target, regions), shading_kept=shading_kept(output, target, regions), ms=ms,
        detail=None if source_mesh is None else detail_kept(output, face.mesh, source.image, source_mesh),
        grain=grain(output, target, face.mesh), target_detail_left=target_detail_left(output, target, face.mesh),
        shadow_red=output_shadow_red, target_shadow_red=target_shadow_red, teeth_on_closed_lips=mouth.teeth_on_closed_lips,
        lip_red=mouth.lip_red, target_lip_red=mouth.target_lip_red, mouth_kept=mouth.mouth_kept,
        too_sharp=too_sharp(output, target, face.mesh),
        strands_left=None if clean is None else strands_left(output, clean, regions),
        hog_found=scorer.dlib_finds(output, face.box) if scorer.dlib_target(target_key, target, face.box) else None,
    )


def _summarise(results: list[RealismResult]) -> dict[str, Any]:
    def mean(values: list) -> float | None:
        values = [v for v in values if v is not None and np.isfinite(v)]
        return float(np.mean(values)) if values else None

    frontal = [r for r in results if r.frontal]
    tones = [r.tone for r in results if r.tone is not None and np.isfinite(r.tone)]
    ms = [r.ms for r in results if r.ms is not None]
    return {
        "faces": len(results),
        "passed": sum(r.passed for r in results),
        "pass_rate": mean([float(r.passed) for r in results]),
        "frontal_pairs": len(frontal),
        "frontal_passed": sum(r.passed for r in frontal),
        "found": sum(r.found for r in results),
        "hog_found": sum(bool(r.hog_found) for r in results),
        "hog_targets": sum(r.hog_found is not None for r in results),
        "mean_output_to_source": mean([r.output_to_source for r in results]),
        "mean_output_to_target": mean([r.output_to_target for r in results]),
        "tone": mean(tones),
        "tone_over_8": sum(t > TONE_BAD for t in tones),
        "edge_step": mean([r.edge_step for r in results]),
        "shading_kept": mean([r.shading_kept for r in results]),
        "detail": mean([r.detail for r in results]),
        "grain": mean([r.grain for r in results]),
        "target_detail_left": mean([r.target_detail_left for r in results]),
        "shadow_red": mean([r.shadow_red for r in results]),
        "target_shadow_red": mean([r.target_shadow_red for r in results if r.shadow_red is not None]),
        "teeth_on_closed_lips": mean([r.teeth_on_closed_lips for r in results]),
        "lip_red": mean([r.lip_red for r in results]),
        "target_lip_red": mean([r.target_lip_red for r in results if r.lip_red is not None]),
        "mouth_kept": mean([r.mouth_kept for r in results]),
        "too_sharp": mean([r.too_sharp for r in results]),
        "strands_left": mean([r.strands_left for r in results]),
        "ms_per_frame": float(np.median(ms)) if ms else None,
        "by_source": {variant: mean([float(r.passed) for r in results if r.source_variant == variant])
                      for variant in dict.fromkeys(r.source_variant for r in results)},
        "tone_by_source": {variant: mean([r.tone for r in results if r.source_variant == variant])
                           for variant in dict.fromkeys(r.source_variant for r in results)},
        # per target person: a wrinkled face's low grain and a smooth one's high grain average out in "grain"
        "grain_by_target": {person: mean([r.grain for r in results if _person(r.target) == person])
                            for person in dict.fromkeys(_person(r.target) for r in results)},
    }


def _person(name: str) -> str:
    """The person of a set entry's name ("grace_hopper/warm" -> "grace_hopper")."""
    return name.split("/", 1)[0]


def _print_summary(summary: dict[str, Any], names: list[str], half: str) -> None:
    print(f"\nrealism set, {half} half ({'not tuned on' if half == 'held' else 'tuned on'})")
    header = (f"{'':<16}{'faces':>6}{'pass':>8}{'frontal':>9}{'found':>7}{'hog':>9}{'d(o,s)':>8}{'tone':>7}{'>8':>5}{'edge':>7}{'shade':>7}"
              f"{'detail':>8}{'grain':>7}{'ghost':>7}{'shadow':>7}{'(tgt)':>6}{'teeth':>7}{'lipred':>7}{'(tgt)':>6}{'mouth':>7}{'sharp':>7}{'hair':>7}{'ms':>7}")
    print(header)
    for name in names:
        row = summary[name]

        def num(value: float | None, digits: int = 2) -> str:
            return f"{value:.{digits}f}" if value is not None else "-"

        print(f"{name:<16}{row['faces']:>6}{row['passed']:>5}/{row['faces']:<2}{row['frontal_passed']:>5}/{row['frontal_pairs']:<3}"
              f"{row['found']:>7}{row['hog_found']:>5}/{row['hog_targets']:<3}{num(row['mean_output_to_source']):>8}{num(row['tone'], 1):>7}{row['tone_over_8']:>5}"
              f"{num(row['edge_step'], 1):>7}{num(row['shading_kept']):>7}{num(row['detail']):>8}{num(row['grain']):>7}{num(row['target_detail_left']):>7}"
              f"{num(row['shadow_red']):>7}{num(row['target_shadow_red']):>6}{num(row['teeth_on_closed_lips'], 3):>7}{num(row['lip_red'], 1):>7}{num(row['target_lip_red'], 1):>6}{num(row['mouth_kept'], 1):>7}"
              f"{num(row['too_sharp']):>7}{num(row['strands_left'], 3):>7}{num(row['ms_per_frame'], 0):>7}")
    print("pass: d(out,src) < 0.6 and < d(out,tgt); frontal: the same on frontal targets; found: the engine finds the "
          "output face; hog: dlib's HOG detector finds it, of the faces it finds in the target; tone: low-passed CIE76 output vs target on the skin (>8: a mask); edge: colour step across the "
          "outline; shade: target's low-frequency shading kept (1 = all); detail: the source's fine detail kept (1 = all); "
          "grain: the skin's finest detail over the target skin's (1 = as grainy; a mask ~0.5); "
          "ghost: the target's own fine detail still showing (0 = none); shadow: how much redder the skin's fine detail gets where "
          "darker (real skin ~0.4, grey wrinkles ~0; (tgt): the target's own); teeth: share of closed lips turned teeth-like; "
          "lipred: lips' CIE a* over the skin's (a grey band ~0; (tgt): the target's own); mouth: CIE76 of an open target mouth's inside vs the "
          "target's (0 = kept); sharp: px of blur the output face lacks against the target face's (0 = as soft); hair: share of the skin streaked where the source had hair drawn over it, against the "
          "clean photo's swap (0 = none); ms: median per frame")
    for name in names:
        row = summary[name]
        cells = ", ".join(f"{k} {100 * v:.0f}%/{row['tone_by_source'][k]:.1f}" for k, v in row["by_source"].items() if v is not None)
        print(f"  {name} pass/tone by source: {cells}")
        grains = ", ".join(f"{person} {value:.2f}" for person, value in row["grain_by_target"].items() if value is not None)
        print(f"  {name} grain by target person: {grains}")


# -- contact sheets --------------------------------------------------------------------------------


def _write_sheets(report: Path, names: list[str], runs: dict[str, SwapOutputs], results: list[RealismResult],
                  sources: list[RealismSource], targets: list[RealismTarget], clips: list[RealismClip]) -> list[Path]:
    """Pages of rows source | target | each run, one row per source and target image (a
    group photo: its largest face; a clip: its middle frame)."""
    scores = {(r.swapper, r.source, r.target): r for r in results}
    rows = []
    for source in sources:
        source_tile = _tile(source.image, _source_box(source.image), source.name)
        for target in targets:
            if target.person == source.person:
                continue
            index = int(np.argmax([f.width for f in target.faces]))
            key = target.name if len(target.faces) == 1 else f"{target.name}#{index}"
            box = target.faces[index].box
            tiles = [source_tile, _tile(target.image, box, target.name)]
            for name in names:
                output = runs[name].stills.get((source.name, target.name))
                tiles.append(_tile(output, box, _caption(name, scores.get((name, source.name, key)))))
            rows.append(np.hstack(tiles))
        for clip in clips:
            if clip.person == source.person:
                continue
            middle = (len(clip.frames) // 2) // CLIP_EVERY * CLIP_EVERY
            box = clip.faces[middle].box
            tiles = [source_tile, _tile(clip.frames[middle], box, f"{clip.name}#{middle}")]
            for name in names:
                frames = runs[name].clips.get((source.name, clip.name))
                tiles.append(_tile(frames[middle] if frames else None, box,
                                   _caption(name, scores.get((name, source.name, f"{clip.name}#{middle}")))))
            rows.append(np.hstack(tiles))
    paths = []
    for page, start in enumerate(range(0, len(rows), ROWS_PER_SHEET)):
        path = report / f"sheet_{page + 1:02d}.png"
        write_image(path, np.vstack(rows[start:start + ROWS_PER_SHEET]))
        paths.append(path)
    return paths


def _source_box(image: np.ndarray) -> np.ndarray:
    from swapcast.benchmarks.realism_set import _photo_mesh

    try:
        mesh = _photo_mesh(image)
    except SwapcastError:
        return np.array([0, 0, image.shape[1], image.shape[0]], np.float32)
    return np.concatenate([mesh.min(0), mesh.max(0)])


def _caption(name: str, result: RealismResult | None) -> str:
    if result is None:
        return f"{name}: none"
    verdict = "pass" if result.passed else "FAIL"
    return f"{name} {verdict} d{result.output_to_source:.2f} tone{result.tone:.1f}"


def _tile(image: np.ndarray | None, box: np.ndarray, caption: str) -> np.ndarray:
    """A square 1.4x the face box around it, ``TILE`` px, captioned (black where there is no image)."""
    tile = np.zeros((TILE, TILE, 3), np.uint8)
    if image is not None:
        centre = (np.asarray(box[:2], np.float64) + np.asarray(box[2:], np.float64)) / 2
        side = 1.4 * max(box[2] - box[0], box[3] - box[1], 1.0)
        scale = TILE / side
        matrix = np.array([[scale, 0, TILE / 2 - scale * centre[0]], [0, scale, TILE / 2 - scale * centre[1]]])
        interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
        tile = cv2.warpAffine(image, matrix, (TILE, TILE), flags=interpolation, borderValue=(0, 0, 0))
    cv2.rectangle(tile, (0, TILE - 16), (TILE, TILE), (0, 0, 0), -1)
    cv2.putText(tile, caption[:34], (3, TILE - 4), cv2.FONT_HERSHEY_SIMPLEX, 0.36, (255, 255, 0), 1, cv2.LINE_AA)
    return tile

