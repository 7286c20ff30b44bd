"""Per-stream face swap: track faces, choose which to swap, run the swapper, paste back.

One instance per stream (a live session, a file being rendered): it owns that stream's
tracker and per-track identities; the engine's models are shared. The prepared face rows go
to the engine's micro-batcher under this stream's session id, so faces from every session of
the node share runner calls; when the batcher refuses them (the session already has too many
rows outstanding) or they time out, the frame goes on unswapped and is counted as
``dropped_by_batcher`` (the live policy: drop, never queue).

A live stream that shares a batcher that waits for company (a GPU's) with others overlaps
its frames: ``begin`` tracks and prepares a frame and queues its faces, the stream's thread
goes on to the next frame while they run, and ``complete`` pastes them back (``process`` is
both, one after the other). On the CPU the rows run at once in the stream's own thread.

On a CUDA node the frame goes to the device once, after tracking (the trackers run on the
host) and only when a face is to be swapped: crops, the runner and the paste-back all work
on that device copy, and the swapped frame comes back once, in place."""

from __future__ import annotations

import itertools
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpu.analysis.hands import HandTracker
from gpu.analysis.identity import identity_distance
from gpu.analysis.occlusion import OcclusionEstimator
from gpu.analysis.people import People
from gpu.batcher import BatcherBusy, BatcherClosed, MicroBatcher
from gpu.runners.triton import TritonUnavailable
from gpu.device import to_device, to_host
from gpu.engine import FaceEngine, SourceFace
from gpu.options import SwapOptions
from gpu.processors.budget import BudgetedKeepMasks, LiveBudget
from gpu.swappers.base import FaceJob, KeepMask, Swapper, any_of, run_jobs
from gpu.types import Face
from streamer.pipeline.people_map import MappedSource, PeopleMap


@dataclass
class StageTimes:
    """Milliseconds spent per stage on one frame (feeds stats, metrics and benchmarks): wall
    time per stage, and in ``cpu_ms`` the CPU time the stream's own thread spent on it (work
    on other threads, a batched runner call or the tracking graphs' own pools, is not in it;
    wall well above CPU is waiting: for a core, the GIL, a batch)."""

    track: float = 0.0
    identity: float = 0.0
    prepare: float = 0.0
    run: float = 0.0
    paste: float = 0.0
    enhance: float = 0.0  # the face enhancer (user model), on the swapped faces
    mark: float = 0.0  # the provenance watermark
    faces_seen: int = 0
    faces_swapped: int = 0
    dropped_by_batcher: int = 0  # 1 when the batcher refused (or timed out) this frame's faces
    cpu_ms: dict[str, float] = field(default_factory=dict)  # stage -> CPU ms of the stream's own thread

    @property
    def total(self) -> float:
        return self.track + self.identity + self.prepare + self.run + self.paste + self.enhance + self.mark


@dataclass
class TrackedFrame:
    """A frame between ``FrameSwapper.track`` and ``prepare``: the faces its tracker found."""

    frame: np.ndarray
    times: StageTimes
    faces: list[Face]
    timestamp: float


@dataclass
class SwapInFlight:
    """A frame between ``FrameSwapper.begin`` and ``complete``: its faces prepared and, when
    ``rows`` is set, already queued at the batcher."""

    frame: np.ndarray
    times: StageTimes
    faces: list[Face] = field(default_factory=list)  # the faces being swapped
    jobs: list[FaceJob] = field(default_factory=list)
    swapper: Swapper | None = None  # the engine's swapper when they were prepared
    work: Any = None  # the frame, or its device copy, that the jobs read and paste into
    rows: Future | None = None  # queued at the batcher; None: run them in complete()


@dataclass
class FrameSwapper:
    engine: FaceEngine
    source: SourceFace | None
    options: SwapOptions = field(default_factory=SwapOptions)
    reference: np.ndarray | None = None  # identity of the person to swap when selection == "reference"
    enabled: bool = True
    session_id: str | None = None  # the batcher's fairness and backpressure unit (default: unique per instance)
    batch_timeout_s: float = 2.0  # a frame whose faces wait longer than this goes on unswapped
    marker: Callable[[np.ndarray], None] | None = None  # watermarks every frame out (streamer.provenance)
    offline: bool = False  # a file (job, `swapcast swap`): the enhancer runs by default, content checks are waited for
    people: People | None = None  # who each face is (gpu.analysis.people): live streams, and files swapped by a map
    mapping: PeopleMap | None = None  # which source each person wears; None: ``source`` on the faces ``options`` select

    def __post_init__(self) -> None:
        if self.options.face_selection == "reference" and self.reference is None:
            raise ValueError("face selection 'reference' needs a reference identity")
        if self.session_id is None:
            self.session_id = f"stream-{next(_stream_ids)}"
        self._tracker = self.engine.tracker(smoothing=self.options.smoothing)
        self._track_identity: dict[int, np.ndarray] = {}
        self._occlusion = OcclusionEstimator()  # this stream's per-track appearance models
        self._hands: HandTracker | None = None  # made when occlusion is first on: the hands in front of its faces
        self.frames_dropped_by_batcher = 0
        self._content_due: float | None = None  # stream time of the next content gate sample
        self._content_pending: Future | None = None  # a live stream's sample being scored
        budgets = self.engine.processors.settings  # live: each optional step only while this stream affords it
        self._enhance_budget = LiveBudget("face enhancer", budgets.enhancer_live_budget_ms, self.session_id)
        self._mask_models = BudgetedKeepMasks(self.engine.keep_masks,
                                              LiveBudget("mask models", budgets.mask_live_budget_ms, self.session_id))
        self._batcher: MicroBatcher | None = None
        self._detach: weakref.finalize | None = None
        self._named: tuple[int, PeopleMap, dict[str, MappedSource | None]] | None = None  # the map's named people (people version, map)
        self.last_wearing: list[tuple[Face, str | None, str]] = []  # the last prepared frame's swapped faces: (face, person, what it wears)
        if self.people is not None:  # an occlusion model is not carried over to another person's track
            self._occlusion.may_adopt = self.people.same_state

    def _batcher_now(self) -> MicroBatcher | None:
        """The engine's current batcher, attached to under this session id (re-attached when
        the engine replaced it); None for an engine without one (rows run directly)."""
        batcher = getattr(self.engine, "batcher", None)
        if batcher is not self._batcher:
            if self._detach is not None:
                self._detach()
                self._detach = None
            if batcher is not None:
                batcher.attach(self.session_id)
                # detach even when close() is never called (a swapper used once and dropped)
                self._detach = weakref.finalize(self, batcher.detach, self.session_id)
            self._batcher = batcher
        return batcher

    def update(self, **changes) -> None:
        """Change options live (no renegotiation, no reload)."""
        self.options = replace(self.options, **changes)
        self._tracker.smoothing = self.options.smoothing

    def process(self, frame: np.ndarray, timestamp: float) -> StageTimes:
        """Swap faces in one video frame in place; ``timestamp`` in seconds drives smoothing.
        Raises ``ContentRefused`` when the content gate refused a sampled frame."""
        return self.complete(self.begin(frame, timestamp))

    def begin(self, frame: np.ndarray, timestamp: float, overlap: bool = False) -> SwapInFlight:
        """Track and prepare one video frame. With ``overlap`` its faces are queued at the
        batcher at once, so the caller can begin its next frame while they run; ``complete``
        then waits for them and swaps the frame in place. Frames must complete in order."""
        return self.prepare(self.track(frame, timestamp), overlap)

    def track(self, frame: np.ndarray, timestamp: float) -> TrackedFrame:
        """``begin``'s first half: the content gate's sample and the tracker (faces found,
        nothing prepared yet). Frames must be tracked, prepared and completed in order."""
        self._check_content(frame, timestamp)
        times = StageTimes()
        started = _started()
        faces = self._tracker.process(frame, timestamp)
        _record(times, "track", started)
        return TrackedFrame(frame, times, faces, timestamp)

    def prepare(self, tracked: TrackedFrame, overlap: bool = False) -> SwapInFlight:
        """``begin``'s second half: the hands near the faces followed, the faces' people
        named, and the faces chosen, cropped and (with ``overlap``) queued at the batcher.
        What this stream keeps per track (identities, people, occlusion models, hands) is
        kept and dropped here, so a file's prepare step (on a thread of its own) is the only
        one to touch it, frame after frame."""
        frame, faces, times = tracked.frame, tracked.faces, tracked.times
        started = _started()
        self._follow_hands(frame, faces)  # here, not in ``track``: the occlusion estimate reads the hands
        _add(times, "track", started)
        started = _started()
        who = None
        if self.people is not None:
            self.people.settle_doubts = self.mapping is not None and self.mapping.names_people
            who = self.people.update(frame, faces, tracked.timestamp)
        _record(times, "identity", started)
        if who is not None:  # per-track state downstream goes by person: a track that changed person starts afresh
            faces = [replace(face, track_id=self.people.state_id(face.track_id)) for face in faces]
            who = {self.people.state_id(track): person for track, person in who.items()}
        self._forget_ended_tracks(faces)
        self._occlusion.forget({face.track_id for face in faces if face.track_id is not None})
        return self._prepare(frame, faces, times, overlap, who)

    def file_stages(self) -> tuple[Callable[[np.ndarray, float], TrackedFrame],
                                   Callable[[TrackedFrame, float], SwapInFlight],
                                   Callable[[SwapInFlight, float], np.ndarray]]:
        """``process`` in three steps for a file's frames, each of which may run on a thread
        of its own (``streamer.media.transcode``): track, prepare, then run and paste. The
        frames come out as ``process`` makes them. Rows go to the batcher as soon as they
        are prepared where its runner gains from company (a GPU's: a file's consecutive
        frames share runner calls); on the CPU they run in the last step's thread."""
        batcher = self._batcher_now()
        overlap = batcher is not None and batcher.wait_for_company

        def run_and_paste(flight: SwapInFlight, timestamp: float) -> np.ndarray:
            self.complete(flight)
            return flight.frame

        return (self.track, lambda tracked, timestamp: self.prepare(tracked, overlap), run_and_paste)

    def _follow_hands(self, frame: np.ndarray, faces: list[Face]) -> None:
        """With occlusion on, the hand model follows the hands near this frame's faces; the
        occlusion estimate keeps them (any skin tone) and does not learn them."""
        if self.options.occlusion == "off" or not self.enabled or not self._wears_anything():
            return
        if self._hands is None:
            self._hands = self.engine.hand_tracker(self.session_id)
            self._occlusion.hands = self._hands
        self._hands.process(frame, faces)

    def complete(self, flight: SwapInFlight) -> StageTimes:
        return self._marked(flight.frame, self._finish(flight))

    def overlaps(self) -> bool:
        """Whether overlapping frames pays: only while other streams share a batcher that
        waits for company (a lone stream's rows run inline, at once, in its own thread, and
        so do a CPU node's, side by side: there the hand-over to another thread cost 2.4 ms
        of CPU a frame and a frame of latency, for a run of 2 ms)."""
        batcher = self._batcher_now()
        return batcher is not None and batcher.wait_for_company and batcher.session_count > 1

    def process_still(self, image: np.ndarray) -> StageTimes:
        """Swap faces in one still image in place (detector + mesh, no tracking)."""
        gate = self.engine.processors.gate
        if gate is not None:
            gate.check(image, "the target image", "frame", self.session_id)
        times = StageTimes()
        started = _started()
        faces = self.engine.analyse_image(image)
        _record(times, "track", started)
        if self.engine.swapper.name in ("mesh", "mesh3d"):
            faces = [f for f in faces if f.mesh is not None]
        for number, face in enumerate(faces):
            face.track_id = -(number + 1)  # still images: identities are never reused
        who = None
        if self.people is not None and self.mapping is not None and self.mapping.names_people:
            started = _started()
            who = dict(zip((face.track_id for face in faces), self.people.identify_still(image, faces), strict=True))
            _record(times, "identity", started)
        return self._marked(image, self._finish(self._prepare(image, faces, times, overlap=False, who=who)))

    def _marked(self, frame: np.ndarray, times: StageTimes) -> StageTimes:
        """A frame with a swapped face leaves marked, the whole picture (the detector finds
        the mark anywhere and accumulates it over frames); an untouched frame stays as it came."""
        if self.marker is not None and times.faces_swapped:
            started = _started()
            self.marker(frame)
            _record(times, "mark", started)
        return times

    def _prepare(self, frame: np.ndarray, faces: list[Face], times: StageTimes, overlap: bool,
                 who: dict[int, str | None] | None = None) -> SwapInFlight:
        flight = SwapInFlight(frame, times)
        times.faces_seen = len(faces)
        self.last_wearing = []
        if not self.enabled or not self._wears_anything() or not faces or self.options.blend <= 0:
            return flight
        started = _started()
        chosen = self._wearing(frame, faces, who)
        _add(times, "identity", started)
        if not chosen:
            return flight
        flight.swapper = swapper = self.engine.swapper
        started = _started()
        flight.work = to_device(frame) if self.engine.device.is_cuda else frame
        keep = self._keep_mask()
        flight.jobs = [swapper.prepare(flight.work, face, source.source.payload, self.options, keep) for face, _, source in chosen]
        flight.faces = [face for face, _, _ in chosen]
        self.last_wearing = [(face, person, source.label) for face, person, source in chosen]
        self._mask_models.frame_done()
        _record(times, "prepare", started)
        batcher = self._batcher_now()
        if overlap and batcher is not None:
            try:
                flight.rows = batcher.submit(self.session_id, flight.jobs)
            except BatcherBusy:
                if not self.offline:  # a file's frame is never dropped: its rows run in complete()
                    self._dropped(flight)
        return flight

    def _finish(self, flight: SwapInFlight) -> StageTimes:
        times = flight.times
        if not flight.jobs:
            return times
        started = _started()
        try:
            rows = self._rows(flight)
        except (BatcherBusy, TimeoutError, TritonUnavailable):  # a Triton server down or slow: the same
            _record(times, "run", started)
            self._dropped(flight)
            return times
        _record(times, "run", started)
        started = _started()
        for job, row in zip(flight.jobs, rows, strict=True):
            flight.swapper.finish(flight.work, job, row)
        if flight.work is not flight.frame:
            flight.frame[...] = to_host(flight.work)
        _record(times, "paste", started)
        times.faces_swapped = len(flight.faces)
        self._enhance(flight.frame, flight.faces, times)
        return times

    def _rows(self, flight: SwapInFlight) -> list:
        """The runner's rows for the flight's jobs: its queued request's, or run now."""
        if flight.rows is not None:
            try:
                return flight.rows.result(self.batch_timeout_s)
            except TimeoutError:
                flight.rows.cancel()  # rows not yet shipped are withdrawn
                raise
        batcher = self._batcher_now()
        if batcher is None:
            return run_jobs(flight.swapper.runner, flight.jobs)
        if not self.offline:
            return batcher.run(self.session_id, flight.jobs, timeout=self.batch_timeout_s)
        # a file's frame waits for room (its later frames' rows, queued ahead, free it) rather than being dropped
        deadline = time.monotonic() + self.batch_timeout_s
        while True:
            try:
                return batcher.run(self.session_id, flight.jobs, timeout=max(0.0, deadline - time.monotonic()))
            except BatcherBusy:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"no room at the batcher for {len(flight.jobs)} rows in {self.batch_timeout_s} s") from None
                time.sleep(0.002)

    def _dropped(self, flight: SwapInFlight) -> None:
        """The batcher refused the faces or they timed out: the frame goes on unswapped."""
        flight.jobs = []
        flight.times.dropped_by_batcher = 1
        self.frames_dropped_by_batcher += 1

    def _enhance(self, frame: np.ndarray, faces: list[Face], times: StageTimes) -> None:
        """The user's face enhancer over the swapped faces: offline by default, live streams
        when the node turns it on for them (engine.processors.enhancer: live) and while it
        fits their budget. What the mask models keep is left alone."""
        processors = self.engine.processors
        live = processors.enhance_live() and self._enhance_budget.affordable
        if processors.enhancer is None or not (self.offline or live):
            return
        started = _started()
        keep = processors.frame_keep_masks(frame, faces, self.session_id) if processors.keep_masks else None
        processors.enhancer.enhance(frame, faces, self.session_id, processors.settings.enhancer_blend, keep)
        _record(times, "enhance", started)
        if not self.offline:
            self._enhance_budget.record(times.enhance)

    def _check_content(self, frame: np.ndarray, timestamp: float) -> None:
        """One frame per ``content_sample_s`` of stream time goes to the content gate. Offline
        the verdict is waited for; live the frame is scored in the background and the verdict
        read on a later frame, so the stream never waits for the classifier."""
        gate = self.engine.processors.gate
        if gate is None:
            return
        pending = self._content_pending
        if pending is not None and pending.done():
            self._content_pending = None
            if pending.exception() is None:  # a busy or closed batcher: the next sample decides
                gate.verdict(gate.score_of(pending.result()), "the stream", "frame")
        period = self.engine.processors.settings.content_sample_s
        due = self._content_due
        if due is not None and due - period <= timestamp < due:
            return
        self._content_due = timestamp + period
        if self.offline:
            gate.check(frame, f"the video at {timestamp:.1f} s", "frame", self.session_id)
        elif self._content_pending is None:
            try:
                self._content_pending = gate.submit(frame, self.session_id)
            except (BatcherBusy, BatcherClosed):
                self._content_due = None  # try again on the next frame

    def _keep_mask(self) -> KeepMask | None:
        """What stays the target's in front of each face: the built-in occlusion estimate
        unless the options turn it off, and any mask models the engine has."""
        built_in = self._occlusion if self.options.occlusion != "off" else None
        self._occlusion.keep_worn = self.options.occlusion == "auto"
        models = self.engine.keep_masks if self.offline else self._mask_models.hooks()  # live: under the stream's budget
        return any_of(built_in, *models)

    def _wears_anything(self) -> bool:
        """Whether any face could be swapped: a source, or a map naming someone's."""
        if self.mapping is None:
            return self.source is not None
        named = any(wears is not None for wears in self.mapping.people.values()) or \
            any(reference.wears is not None for reference in self.mapping.references)
        return named or (self.source is not None and not self.mapping.keep_unmapped)

    def _wearing(self, frame: np.ndarray, faces: list[Face], who: dict[int, str | None] | None
                 ) -> list[tuple[Face, str | None, MappedSource]]:
        """The faces to swap, each with its person and the source it wears. A map naming
        people swaps only faces whose person is known (a new or doubted track waits: it
        is never given someone else's source); otherwise the options' selection, with
        ``source`` (or nothing, when the map keeps the people it does not name)."""
        mapping = self.mapping
        default = MappedSource("source", self.source) if self.source is not None else None
        if mapping is None or not mapping.names_people:
            if mapping is not None and mapping.keep_unmapped or default is None:
                return []
            return [(face, who.get(face.track_id) if who else None, default) for face in self._select(frame, faces)]
        if who is None:
            return []
        named = self._named_people(mapping)
        chosen = []
        for face in faces:
            person = who.get(face.track_id)
            if person is None:
                continue
            wears = named[person] if person in named else (None if mapping.keep_unmapped else default)
            if wears is not None:
                chosen.append((face, person, wears))
        return chosen

    def _named_people(self, mapping: PeopleMap) -> dict[str, MappedSource | None]:
        """``mapping.named`` over this stream's people, again only when either changed."""
        version = self.people.version if self.people is not None else 0
        if self._named is None or self._named[0] != version or self._named[1] is not mapping:
            self._named = (version, mapping, mapping.named(self.people.snapshot()) if self.people is not None else {})
        return self._named[2]

    def _select(self, frame: np.ndarray, faces: list[Face]) -> list[Face]:
        selection = self.options.face_selection
        if selection == "all":
            return faces
        if selection == "largest":
            return [max(faces, key=lambda f: f.area)]
        # reference: identity is computed once per track (~60 ms), when the track starts
        distances = []
        for face in faces:
            key = face.track_id if face.track_id is not None else id(face)
            if key not in self._track_identity:
                self._track_identity[key] = self.engine.identity(frame, face)
            distances.append((identity_distance(self._track_identity[key], self.reference), face))
        matches = [(d, f) for d, f in distances if d < self.options.reference_threshold]
        return [min(matches, key=lambda m: m[0])[1]] if matches else []

    def _forget_ended_tracks(self, faces: list[Face]) -> None:
        live = {f.track_id for f in faces}
        for key in [k for k in self._track_identity if k not in live]:
            del self._track_identity[key]

    def close(self) -> None:
        self._tracker.close()
        if self._hands is not None:
            self._hands.close()
        if self._detach is not None:
            self._detach()
            self._detach = None
        self._batcher = None


_stream_ids = itertools.count(1)


def _started() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def _add(times: StageTimes, stage: str, started: tuple[float, float]) -> None:
    """``_record``, added to what ``stage`` already took on this frame."""
    before_wall, before_cpu = getattr(times, stage), times.cpu_ms.get(stage, 0.0)
    _record(times, stage, started)
    setattr(times, stage, getattr(times, stage) + before_wall)
    times.cpu_ms[stage] += before_cpu


def _record(times: StageTimes, stage: str, started: tuple[float, float]) -> None:
    """Add ``stage``'s wall and calling-thread CPU milliseconds since ``started``."""
    wall, cpu = started
    setattr(times, stage, getattr(times, stage) + (time.perf_counter() - wall) * 1000.0)
    times.cpu_ms[stage] = times.cpu_ms.get(stage, 0.0) + (time.thread_time() - cpu) * 1000.0
