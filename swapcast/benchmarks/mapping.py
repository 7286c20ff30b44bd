"""``bench quality``'s mapping part: on the people set (``people_clips``), every person is
mapped by a reference photo to someone else's face (astronaut -> Grace Hopper -> the
third person -> astronaut) and each clip runs through one stream's ``FrameSwapper`` as a
file or a live session does. Per person:

- **present**: frames where the ground truth shows their face (mostly in view, turned at
  most 45 degrees);
- **own / another's**: frames where their face was swapped with their own mapped source,
  or with another person's (the second must be 0); ``correct`` = own / (own + another's),
  the share of their swapped frames with their own source;
- **coverage**: present frames in which they were swapped with their own source;
- **identity** (every ``IDENTITY_EVERY`` frames where they were swapped): dlib distance
  from the output face to their mapped source, and whether it is under 0.6 and nearer
  than to every other source;
- **stray**: swapped faces that are no one in the ground truth.

And the cost of knowing who is who: the ``identity`` stage (descriptors, signatures) per
tracked face per frame, and the descriptors computed."""

from __future__ import annotations

import time
from pathlib import Path
from dataclasses import asdict, dataclass, field
from typing import Any

import cv2
import numpy as np

from gpu.analysis.identity import SAME_PERSON_DISTANCE, identity_distance
from gpu.analysis.people import People
from gpu.engine import FaceEngine
from gpu.options import SwapOptions
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.pipeline.people_map import MappedSource, PeopleMap, Reference
from swapcast.benchmarks.people_clips import (
    PEOPLE,
    SPLITS,
    PeopleClip,
    clip_by_name,
    head_model,
    people_clips,
    photo_of,
    steady_clip,
    who_is,
)

WEARS = {"astronaut": "grace_hopper", "grace_hopper": "third", "third": "astronaut"}  # nobody wears their own face
IDENTITY_EVERY = 6


@dataclass
class PersonScore:
    clip: str
    split: str
    person: str
    wears: str
    present: int = 0
    own: int = 0
    others: int = 0
    covered: int = 0
    identity_checked: int = 0
    identity_passed: int = 0
    to_source: list[float] = field(default_factory=list)

    @property
    def correct(self) -> float | None:
        swapped = self.own + self.others
        return self.own / swapped if swapped else None

    @property
    def coverage(self) -> float | None:
        return self.covered / self.present if self.present else None

    def row(self) -> dict[str, Any]:
        row = {k: v for k, v in asdict(self).items() if k != "to_source"}
        row.update(correct=self.correct, coverage=self.coverage,
                   mean_to_source=float(np.mean(self.to_source)) if self.to_source else None)
        return row


@dataclass
class ClipScore:
    people: list[PersonScore]
    stray: int = 0
    faces: int = 0  # tracked faces over all frames
    identity_ms: float = 0.0  # the identity stage over all frames
    describe_ms: float = 0.0  # ... of which dlib (its frontal check and descriptors)
    descriptors: int = 0
    ms_per_frame: float = 0.0


class SourceSet:
    """Each person's photo registered once as a source and as a reference identity."""

    def __init__(self, engine: FaceEngine, people: tuple[str, ...] = PEOPLE) -> None:
        self.engine = engine
        self.sources: dict[str, MappedSource] = {}
        self.identities: dict[str, np.ndarray] = {}
        for person in people:
            photo = photo_of(person)
            source = engine.register_source(photo, label=person)
            self.sources[person] = MappedSource(person, source)
            face = _ground_truth_face(photo)
            self.identities[person] = engine.identity(photo, face)

    def mapping(self, wears: dict[str, str], keep_unmapped: bool = True) -> PeopleMap:
        """People named by their own photos, each wearing ``wears[person]``'s face."""
        return PeopleMap(references=tuple(Reference(person, self.identities[person], self.sources[other])
                                          for person, other in wears.items()), keep_unmapped=keep_unmapped)


def score_clip(engine: FaceEngine, clip: PeopleClip, sources: SourceSet, *, live: bool = False,
               identity_every: int | None = IDENTITY_EVERY, options: SwapOptions | None = None,
               keep: dict[int, np.ndarray] | None = None) -> ClipScore:
    """Run ``clip`` through a mapped ``FrameSwapper`` (``live``: one descriptor a frame at
    most, as live sessions run; else every one due, as files) and score it per person.
    ``keep``: frame index -> None, filled with those output frames (pictures)."""
    wears = {person: WEARS[person] for person in clip.people}
    people = People(engine.frontal_identity, per_frame=1 if live else None)
    swapper = FrameSwapper(engine, None, options or SwapOptions(), people=people, mapping=sources.mapping(wears),
                           offline=not live, session_id=f"mapping-{clip.name}")
    scores = {person: PersonScore(clip.name, clip.split, person, wears[person]) for person in clip.people}
    result = ClipScore(list(scores.values()))
    started = time.perf_counter()
    try:
        for index, frame in enumerate(clip.frames):
            output = frame.copy()
            times = swapper.process(output, index / clip.fps)
            result.faces += times.faces_seen
            result.identity_ms += times.identity
            _score_frame(clip, index, output, swapper.last_wearing, scores, sources, identity_every, result)
            if keep is not None and index in keep:
                keep[index] = output
    finally:
        swapper.close()
    result.ms_per_frame = (time.perf_counter() - started) * 1000 / max(len(clip.frames), 1)
    result.descriptors = people.descriptors
    result.describe_ms = people.describe_ms
    return result


def _score_frame(clip: PeopleClip, index: int, output: np.ndarray, wearing: list, scores: dict[str, PersonScore],
                 sources: SourceSet, identity_every: int | None, result: ClipScore) -> None:
    truth = clip.truth[index]
    swapped: dict[str, str] = {}
    for face, _, label in wearing:
        who = who_is(face.box, truth)
        if who is None:
            result.stray += 1
            continue
        swapped[who.person] = label
        score = scores[who.person]
        if label == score.wears:
            score.own += 1
        else:
            score.others += 1
    for appearance in truth:
        score = scores[appearance.person]
        if appearance.present:
            score.present += 1
            if swapped.get(appearance.person) == score.wears:
                score.covered += 1
        if identity_every and index % identity_every == 0 and appearance.person in swapped and appearance.present:
            identity = sources.engine.identity(output, appearance.face())
            distances = {person: identity_distance(identity, own) for person, own in sources.identities.items()
                         if person in WEARS.values()}
            mine = distances[score.wears]
            score.identity_checked += 1
            score.to_source.append(mine)
            if mine < SAME_PERSON_DISTANCE and all(mine < d for p, d in distances.items() if p != score.wears):
                score.identity_passed += 1


def _ground_truth_face(photo: np.ndarray):
    from gpu.analysis.face_mesh import face_from_mesh

    return face_from_mesh(head_model(photo).points)


def run_mapping(engines: dict[str, FaceEngine], quick: bool = False, live: bool = False,
                splits: tuple[str, ...] = SPLITS, options: SwapOptions | None = None,
                report: Path | None = None) -> dict[str, Any]:
    """The mapping part for every swapper: per split, per clip and person, and totals, and
    the cost on a steady stream; with ``report``, a picture per clip and swapper (four
    moments: input above, output below). ``quick``: the tuning half's crossing, shortened."""
    out: dict[str, Any] = {"wears": WEARS, "live": live, "splits": {}}
    for split in ("tuning",) if quick else splits:
        clips = [clip_by_name("cross", quick=True)] if quick else people_clips(split)
        rows: list[dict[str, Any]] = []
        costs: list[dict[str, Any]] = []
        for swapper, engine in engines.items():
            sources = SourceSet(engine)
            for clip in clips:
                moments = {int(i): None for i in np.linspace(0, len(clip.frames) - 1, 4)}
                score = score_clip(engine, clip, sources, live=live, options=options, keep=moments)
                if report is not None:
                    _picture(report / f"mapping-{split}-{clip.name}-{swapper}.jpg", clip, moments)
                rows.extend({**person.row(), "swapper": swapper} for person in score.people)
                costs.append({"swapper": swapper, "clip": clip.name, "stray": score.stray, "descriptors": score.descriptors,
                              "identity_ms_per_face": score.identity_ms / max(score.faces, 1),
                              "dlib_ms_per_face": score.describe_ms / max(score.faces, 1),
                              "ms_per_frame": score.ms_per_frame})
        out["splits"][split] = {"people": rows, "clips": costs, "totals": _totals(rows, costs)}
    if quick:
        return out
    clip = steady_clip()
    engine = next(iter(engines.values()))
    score = score_clip(engine, clip, SourceSet(engine), live=True, identity_every=None, options=options)
    faces = max(score.faces, 1)
    out["steady"] = {"clip": clip.name, "seconds": len(clip.frames) / clip.fps, "faces": score.faces,
                     "descriptors": score.descriptors, "others": sum(p.others for p in score.people),
                     "identity_ms_per_face": score.identity_ms / faces, "dlib_ms_per_face": score.describe_ms / faces,
                     "dlib_ms_per_call": score.describe_ms / max(score.descriptors, 1)}
    return out


def _picture(path: Path, clip: PeopleClip, moments: dict[int, np.ndarray | None]) -> None:
    small = lambda image: cv2.resize(image, (320, 240), interpolation=cv2.INTER_AREA)  # noqa: E731
    top = np.hstack([small(clip.frames[i]) for i in moments])
    bottom = np.hstack([small(out) for out in moments.values() if out is not None])
    if bottom.shape == top.shape:
        cv2.imwrite(str(path), cv2.cvtColor(np.vstack([top, bottom]), cv2.COLOR_RGB2BGR))


def _totals(rows: list[dict[str, Any]], costs: list[dict[str, Any]]) -> dict[str, Any]:
    own, others = sum(r["own"] for r in rows), sum(r["others"] for r in rows)
    present, covered = sum(r["present"] for r in rows), sum(r["covered"] for r in rows)
    checked, passed = sum(r["identity_checked"] for r in rows), sum(r["identity_passed"] for r in rows)
    correct = [r["correct"] for r in rows if r["correct"] is not None]
    return {
        "correct": own / (own + others) if own + others else None,
        "worst_person_correct": min(correct) if correct else None,
        "frames_with_another": others,
        "coverage": covered / present if present else None,
        "worst_person_coverage": min((r["coverage"] for r in rows if r["coverage"] is not None), default=None),
        "identity_pass": passed / checked if checked else None,
        "stray": sum(c["stray"] for c in costs),
        "descriptors": sum(c["descriptors"] for c in costs),
        "identity_ms_per_face": float(np.mean([c["identity_ms_per_face"] for c in costs])) if costs else None,
        "dlib_ms_per_face": float(np.mean([c["dlib_ms_per_face"] for c in costs])) if costs else None,
    }


def print_mapping(result: dict[str, Any]) -> None:
    """The mapping part as a table per split, and the issue's bar."""
    mode = "live (one descriptor a frame)" if result["live"] else "files"
    print(f"\nmapping ({mode}): each person mapped by a reference photo to "
          + ", ".join(f"{a} -> {b}" for a, b in result["wears"].items()))
    for split, part in result["splits"].items():
        print(f"\n[{split}] {'swapper':<8}{'clip':<20}{'person':<14}{'present':>8}{'own':>6}{'another':>8}"
              f"{'correct':>9}{'coverage':>9}{'id pass':>9}{'d(o,src)':>9}")
        for row in part["people"]:
            print(f"{'':<{len(split) + 3}}{row['swapper']:<8}{row['clip']:<20}{row['person']:<14}{row['present']:>8}"
                  f"{row['own']:>6}{row['others']:>8}{_pct(row['correct']):>9}{_pct(row['coverage']):>9}"
                  f"{_pct(row['identity_passed'] / row['identity_checked'] if row['identity_checked'] else None):>9}"
                  f"{_num(row['mean_to_source']):>9}")
        totals = part["totals"]
        verdict = ("PASS" if totals["worst_person_correct"] is not None and totals["worst_person_correct"] >= 0.98
                   and totals["frames_with_another"] == 0 else "FAIL")
        print(f"{'':<{len(split) + 3}}all: correct {_pct(totals['correct'])} (worst person {_pct(totals['worst_person_correct'])}), "
              f"{totals['frames_with_another']} frames with another's source, coverage {_pct(totals['coverage'])} "
              f"(worst {_pct(totals['worst_person_coverage'])}), identity pass {_pct(totals['identity_pass'])}, "
              f"stray {totals['stray']}; {totals['descriptors']} dlib calls, identity stage "
              f"{_num(totals['identity_ms_per_face'])} ms per tracked face per frame (dlib {_num(totals['dlib_ms_per_face'])})")
        print(f"{'':<{len(split) + 3}}each person their own source in >= 98% of their swapped frames, never another's -> {verdict}")
    steady = result.get("steady")
    if steady:
        print(f"\ncost on a steady stream ({steady['seconds']:.0f} s, two people, live): identity stage "
              f"{_num(steady['identity_ms_per_face'])} ms per tracked face per frame (of which dlib "
              f"{_num(steady['dlib_ms_per_face'])}: {steady['descriptors']} calls of {_num(steady['dlib_ms_per_call'])} ms), "
              f"{steady['others']} frames with another's source "
              f"-> {'PASS' if steady['identity_ms_per_face'] <= 1.0 else 'FAIL'} (<= 1 ms)")


def _pct(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "-"


def _num(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "-"
