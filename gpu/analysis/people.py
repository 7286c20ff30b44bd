"""People, not boxes: who each tracked face is, kept across the tracker losing and finding
them, and never shared by two faces at once.

A face track belongs to a person. A person is known by identity descriptors (dlib's 128-d,
``gpu.analysis.identity``: ~60 ms each, so never per frame): a new track is described as
soon as its face is turned to the camera (``DESCRIBE_YAW``) and matched to the people seen
before (``SAME_PERSON``); a face that matches nobody is a new person. So someone who left
the picture, turned away or was hidden -- the tracker drops them and later starts a new
track -- gets their id back.

The tracker itself can move a track from one face to another: when someone walks in front
of a face, its track slides onto the nearer face and follows it (measured on the people
set: a track followed the walker for the rest of the clip). So every frame each track's
*signature* -- the frame's colours at its mesh's points, over the face's own brightness,
about 0.1 ms -- is compared with what the track looked like (a running model): a jump
(``SIGNATURE_JUMP``) puts the track in doubt. A track in doubt, or one whose box crossed
another's, is described again; until then its person is unknown, and unknown faces are
not given anyone's source (``update`` answers None for them). A track confirmed long ago
is described again every ``RECHECK_S`` (a better view joins the person's descriptors).

Per-track state downstream (smoothing, occlusion models, a swapper's neutral shape) must
not carry one person's data over to another: ``state_id`` is the track's id until the
track's person changes, then a fresh one.

One ``People`` per stream (a live session, a file), used by that stream's thread; the
listing (``snapshot``) may be read from any thread."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache

import cv2
import numpy as np
import scipy.sparse

from gpu.analysis.face_mesh import new_track_id
from gpu.analysis.identity import SAME_PERSON_DISTANCE, identity_distance
from gpu.models.canonical_mesh import canonical_mesh
from gpu.types import Face

SAME_PERSON = SAME_PERSON_DISTANCE  # a descriptor this close to one of a person's is that person
MAX_EXEMPLARS = 8  # descriptors kept per person (views that differ from each other)
EXEMPLAR_SPREAD = 0.2  # a descriptor joins a person's exemplars only this far from all of them
DESCRIBE_YAW = 35.0  # degrees: a face turned further is not described (its descriptor is unreliable)
MIN_EYE_PX = 14.0  # ... nor one whose eyes are closer together than this (too small)
RETRY_FRAMES = 8  # a track described and still in doubt (or not describable) waits this long before the next try
NEW_PERSON = 0.7  # a descriptor between SAME_PERSON and this from someone known is not yet a new person ...
NEW_AFTER = 2  # ... until this many descriptors of the track said so (a half-hidden view reads as a stranger),
STRANGE_RETRY_FRAMES = 3  # ... the next one this many frames later
RECHECK_S = 30.0  # seconds: a confirmed track is described again after this long (a flip the signature missed)
SIGNATURE_JUMP = 0.2  # median per-point colour change (over the face's brightness) that puts a track in doubt
SIGNATURE_LEARN = 0.15  # the track's model follows its face at this rate per frame (slow turns, light)
SIGNATURE_PX = 48  # the face is read this many pixels wide
SIGNATURE_FACING = 0.5  # points turned further from the camera than this cosine are not compared
CROSS_IOU = 0.1  # two tracks whose boxes overlap this much have crossed: both are described again once apart
APART_IOU = 0.02
THUMBNAIL_PX = 128
MAX_ENDED = 64  # ended tracks whose person is remembered (for ``same_state``)
MAX_PEOPLE = 64  # people one stream remembers (a broadcast shows hundreds: the ones seen longest ago go)

Describe = Callable[[np.ndarray, Face], np.ndarray | None]  # None: no trustworthy descriptor of this view


@dataclass
class Person:
    """Someone seen in the stream (or named by a scan before it)."""

    id: str
    exemplars: list[np.ndarray] = field(default_factory=list)
    first_seen: float | None = None  # stream seconds
    last_seen: float | None = None
    since: float | None = None  # wall-clock time first seen
    frames: int = 0
    thumbnail: np.ndarray | None = None  # RGB crop around the face, at most THUMBNAIL_PX a side
    thumbnail_yaw: float = 180.0  # how turned the thumbnail's face was (the most frontal is kept)

    def distance(self, descriptor: np.ndarray) -> float:
        return min((identity_distance(e, descriptor) for e in self.exemplars), default=math.inf)

    def learn(self, descriptor: np.ndarray) -> None:
        """Keep ``descriptor`` when it is a view unlike the kept ones (a turn, a light)."""
        if not self.exemplars or (len(self.exemplars) < MAX_EXEMPLARS and self.distance(descriptor) > EXEMPLAR_SPREAD):
            self.exemplars.append(np.asarray(descriptor, np.float32))


@dataclass(frozen=True)
class PersonView:
    """A person as listed (a snapshot: safe to hand to another thread)."""

    id: str
    first_seen: float | None
    last_seen: float | None
    since: float | None
    frames: int
    on_screen: bool
    thumbnail: np.ndarray | None
    identity: tuple[np.ndarray, ...]


@dataclass
class _Track:
    person: str | None = None  # who it is; None until described
    doubt: bool = False  # the person may no longer be on this track: not trusted until described again
    crossed: bool = False  # its box overlapped another track's: described again once apart
    state_id: int = 0
    signature: np.ndarray | None = None  # (468, 3) running model of its colours
    facing: np.ndarray | None = None  # (468,) how squarely the model's points were seen
    overlapping: bool = False  # its box overlaps another track's now
    described_at: float | None = None  # stream seconds of the last descriptor
    wait: int = 0  # frames before the next describe attempt
    strange: int = 0  # descriptors in a row that were near someone known but not near enough


class People:
    """Track ids -> people for one stream. ``update`` once per frame with the tracker's
    faces; ``describe`` is the identity descriptor where it can be trusted
    (``FaceEngine.frontal_identity``). A stream keeps at most ``MAX_PEOPLE``: past that the
    one seen longest ago is forgotten (found again, they get a new id)."""

    def __init__(self, describe: Describe, *, known: Iterable[Person] = (), per_frame: int | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._describe = describe
        self._per_frame = per_frame  # descriptors one frame may compute (live: 1, a stream's frame waits for it); None: all due
        self._clock = clock
        self._people: dict[str, Person] = {}
        self._numbers = 0
        for person in known:
            self._people[person.id] = person
            self._numbers = max(self._numbers, person_number(person.id))
        self._tracks: dict[int, _Track] = {}
        self._ended_states: dict[int, str] = {}  # state ids of ended tracks (or of a track before its person changed) -> person
        self._on_screen: set[str] = set()
        self._together: set[frozenset[str]] = set()  # pairs of people seen in one frame: never one person
        self._lock = threading.Lock()  # guards the people for ``snapshot`` (another thread)
        self.version = 0  # bumped whenever a person's identity changes (callers cache by it)
        self.descriptors = 0  # asked for so far (cost accounting: dlib's frontal check, and its descriptor where that passes)
        self.describe_ms = 0.0  # ... and the time they took
        self.reasons: dict[str, int] = {}  # why they were computed: new, doubt, crossed, recheck
        # False: only new tracks are described. A live stream whose map names nobody only
        # lists its people; its swap never waits on them, so a doubt or a recheck (a 60-90 ms
        # dlib call on the stream's thread, GIL held: frames dropped) buys it nothing
        self.settle_doubts = True

    # -- per frame ---------------------------------------------------------------------------

    def update(self, frame: np.ndarray, faces: list[Face], timestamp: float) -> dict[int, str | None]:
        """Each face's person (by ``track_id``), None where it is not known (a new track not
        described yet, a track in doubt). Faces without a track id (stills) are described
        each time."""
        live = {face.track_id for face in faces if face.track_id is not None}
        for track_id in [key for key in self._tracks if key not in live]:
            ended = self._tracks.pop(track_id)
            if ended.person is not None:
                self._remember_ended(ended.state_id, ended.person)
        tracks = {face.track_id: self._tracks.setdefault(face.track_id, _Track(state_id=face.track_id))
                  for face in faces if face.track_id is not None}
        self._mark_crossings(faces, tracks)
        for face in faces:
            track = tracks.get(face.track_id)
            if track is not None:
                self._follow(frame, face, track)
        budget = math.inf if self._per_frame is None else self._per_frame
        for face in sorted(faces, key=lambda f: _urgency(tracks.get(f.track_id))):
            track = tracks.get(face.track_id)
            if budget <= 0 or (track is not None and not _due(track, timestamp)):
                continue
            if not self.settle_doubts and _urgency(track) > 0:
                continue
            if track is not None and track.overlapping:
                continue  # a face over another one: described once they are apart
            if not describable(face):
                if track is not None:
                    track.wait = RETRY_FRAMES
                continue
            budget -= 1
            reason = ("new", "doubt", "crossed", "recheck")[_urgency(track)]
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
            self._identify(frame, face, track if track is not None else _Track(), timestamp, tracks)
        answer = {}
        seen = set()
        with self._lock:
            for face in faces:
                track = tracks.get(face.track_id)
                person = None if track is None or track.doubt else track.person
                if track is not None:
                    track.wait = max(0, track.wait - 1)
                if face.track_id is not None:
                    answer[face.track_id] = person
                if person is not None and person not in seen:
                    seen.add(person)
                    entry = self._people[person]
                    entry.frames += 1
                    entry.last_seen = timestamp
            self._on_screen = seen
        if len(seen) > 1:
            self._together.update(frozenset((a, b)) for a in seen for b in seen if a < b)
        return answer

    def identify_still(self, image: np.ndarray, faces: list[Face]) -> list[str | None]:
        """The people of a still image's faces (each described; two faces are never one person)."""
        taken: set[str] = set()
        out = []
        for face in faces:
            if not describable(face, max_yaw=90.0):
                out.append(None)
                continue
            track = _Track(strange=NEW_AFTER)  # a still has no second view to wait for
            self._identify(image, face, track, 0.0, {}, taken=taken)
            if track.person is not None:
                taken.add(track.person)
            out.append(track.person)
        if len(taken) > 1:
            self._together.update(frozenset((a, b)) for a in taken for b in taken if a < b)
        with self._lock:
            for person in taken:
                self._people[person].frames += 1
        return out

    def state_id(self, track_id: int | None) -> int | None:
        """The id per-track state goes by: the track's, or a fresh one since its person changed."""
        track = self._tracks.get(track_id) if track_id is not None else None
        return track.state_id if track is not None else track_id

    def same_state(self, ended_state: int, new_state: int) -> bool:
        """Whether per-track state of ``ended_state`` may be taken over by ``new_state``:
        not when they are known to be different people (a re-found track's occlusion
        model)."""
        ended, new = self._person_of_state(ended_state), self._person_of_state(new_state)
        return ended is None or new is None or ended == new

    def consolidated(self) -> list[Person]:
        """The people of a whole file, clustered over it: two never seen in one frame whose
        descriptors are as close as one person's are (average over their exemplars under
        ``SAME_PERSON``) are one person (a first view that read as a stranger); then
        numbered again by first appearance. The stream's own listing is left as it was."""
        people = {p.id: Person(p.id, list(p.exemplars), p.first_seen, p.last_seen, p.since, p.frames, p.thumbnail,
                               p.thumbnail_yaw) for p in self._people.values() if p.exemplars}
        together = set(self._together)
        while True:
            pairs = [(_linkage(a, b), a.id, b.id) for a in people.values() for b in people.values()
                     if a.id < b.id and frozenset((a.id, b.id)) not in together]
            close = min((pair for pair in pairs if pair[0] < SAME_PERSON), default=None)
            if close is None:
                break
            keep, gone = sorted((people[close[1]], people[close[2]]), key=lambda p: (p.first_seen or 0.0, p.id))
            _merge(keep, people.pop(gone.id))
            together = {pair if gone.id not in pair else frozenset({*pair} - {gone.id} | {keep.id}) for pair in together}
        ordered = sorted(people.values(), key=lambda p: (p.first_seen if p.first_seen is not None else math.inf, p.id))
        for number, person in enumerate(ordered, 1):
            person.id = f"person-{number}"
        return ordered

    # -- listing -----------------------------------------------------------------------------

    def snapshot(self) -> list[PersonView]:
        with self._lock:
            return [PersonView(p.id, p.first_seen, p.last_seen, p.since, p.frames, p.id in self._on_screen,
                               p.thumbnail, tuple(p.exemplars)) for p in self._people.values() if p.frames or p.exemplars]

    def person(self, person_id: str) -> PersonView | None:
        return next((view for view in self.snapshot() if view.id == person_id), None)

    @property
    def on_screen(self) -> set[str]:
        return set(self._on_screen)

    # -- inside -----------------------------------------------------------------------------

    def _person_of_state(self, state: int) -> str | None:
        for track in self._tracks.values():
            if track.state_id == state:
                return track.person
        return self._ended_states.get(state)

    def _forget_long_gone(self, keep: set[str]) -> None:
        """Past ``MAX_PEOPLE``: forget those seen longest ago (never one on screen or in ``keep``)."""
        while len(self._people) > MAX_PEOPLE:
            gone = [p for p in self._people.values() if p.id not in keep and p.id not in self._on_screen]
            if not gone:
                return
            oldest = min(gone, key=lambda p: p.last_seen if p.last_seen is not None else -math.inf)
            del self._people[oldest.id]
            self.version += 1

    def _remember_ended(self, state: int, person: str) -> None:
        self._ended_states[state] = person
        while len(self._ended_states) > MAX_ENDED:
            del self._ended_states[next(iter(self._ended_states))]

    def _mark_crossings(self, faces: list[Face], tracks: dict[int, _Track]) -> None:
        """Tracks whose boxes overlap: the tracker may have swapped them over."""
        boxes = [(face.track_id, face.box) for face in faces if face.track_id is not None]
        for first, box in boxes:
            overlap = max((_iou(box, other) for second, other in boxes if second != first), default=0.0)
            track = tracks[first]
            track.overlapping = overlap > APART_IOU
            if overlap >= CROSS_IOU and not track.crossed:
                track.crossed, track.wait = True, 0

    def _follow(self, frame: np.ndarray, face: Face, track: _Track) -> None:
        """Compare the track's face with its model: a jump is doubt; else the model learns."""
        signature = face_signature(frame, face)
        if signature is None:
            return
        colours, facing = signature
        if track.signature is None or track.person is None or track.doubt:
            return
        both = (facing >= SIGNATURE_FACING) & (track.facing >= SIGNATURE_FACING)
        if both.sum() < 40:
            return  # too turned to compare: nothing learnt either
        change = float(np.median(np.linalg.norm(colours[both] - track.signature[both], axis=1)))
        if change > SIGNATURE_JUMP:
            track.doubt = True
            track.wait = 0
            return
        seen = facing >= SIGNATURE_FACING
        rate = SIGNATURE_LEARN * seen[:, None]
        track.signature = track.signature + rate * (colours - track.signature)
        track.facing = np.where(seen, np.maximum(track.facing * (1 - SIGNATURE_LEARN), facing), track.facing)

    def _identify(self, frame: np.ndarray, face: Face, track: _Track, timestamp: float,
                  tracks: dict[int, _Track], taken: set[str] | None = None) -> None:
        """Describe ``face`` and settle who its track is."""
        started = time.perf_counter()
        found = self._describe(frame, face)
        self.describe_ms += (time.perf_counter() - started) * 1000.0
        self.descriptors += 1
        track.wait = RETRY_FRAMES
        if found is None:
            return  # dlib sees no frontal face there now: tried again later
        descriptor = np.asarray(found, np.float32)
        track.described_at = timestamp
        held = set(taken or ())  # people other confirmed tracks are: two faces are never one person
        held |= {other.person for key, other in tracks.items()
                 if key != face.track_id and other.person is not None and not other.doubt}
        with self._lock:
            candidates = [p for p in self._people.values() if p.id not in held and p.exemplars]
            best = min(candidates, key=lambda p: p.distance(descriptor), default=None)
            distance = best.distance(descriptor) if best is not None else math.inf
            if distance >= SAME_PERSON and distance < NEW_PERSON and track.strange + 1 < NEW_AFTER:
                track.strange += 1
                track.wait = STRANGE_RETRY_FRAMES
                return  # near someone, not near enough: another view decides
            track.strange = 0
            if best is not None and distance < SAME_PERSON:
                person = best
            else:
                self._numbers += 1
                person = Person(f"person-{self._numbers}", first_seen=timestamp, since=self._clock())
                self._people[person.id] = person
                self._forget_long_gone(held | {person.id})
            before = len(person.exemplars)
            person.learn(descriptor)
            if len(person.exemplars) != before:
                self.version += 1
            if person.first_seen is None:
                person.first_seen, person.since = timestamp, self._clock()
            yaw = abs(face_yaw(face))
            if person.thumbnail is None or yaw < person.thumbnail_yaw - 5:
                person.thumbnail, person.thumbnail_yaw = _thumbnail(frame, face.box), yaw
        if track.person is not None and track.person != person.id:
            self._remember_ended(track.state_id, track.person)
            track.state_id = new_track_id()  # another person: per-track state starts again
        track.person, track.doubt, track.crossed = person.id, False, False
        signature = face_signature(frame, face)
        track.signature, track.facing = signature if signature is not None else (None, None)


def _linkage(a: Person, b: Person) -> float:
    return float(np.mean([identity_distance(x, y) for x in a.exemplars for y in b.exemplars]))


def _merge(into: Person, other: Person) -> None:
    for descriptor in other.exemplars:
        into.learn(descriptor)
    into.frames += other.frames
    firsts = [t for t in (into.first_seen, other.first_seen) if t is not None]
    lasts = [t for t in (into.last_seen, other.last_seen) if t is not None]
    into.first_seen, into.last_seen = (min(firsts) if firsts else None), (max(lasts) if lasts else None)
    if other.thumbnail is not None and (into.thumbnail is None or other.thumbnail_yaw < into.thumbnail_yaw):
        into.thumbnail, into.thumbnail_yaw = other.thumbnail, other.thumbnail_yaw


def _urgency(track: _Track | None) -> int:
    """Which faces are described first when a frame's budget is short."""
    if track is None or track.person is None:
        return 0
    if track.doubt:
        return 1
    if track.crossed:
        return 2
    return 3


def _due(track: _Track, timestamp: float) -> bool:
    if track.wait > 0:
        return False
    if track.person is None or track.doubt:
        return True
    if track.crossed:
        return not track.overlapping  # once apart
    return track.described_at is None or timestamp - track.described_at >= RECHECK_S


def describable(face: Face, max_yaw: float = DESCRIBE_YAW) -> bool:
    """Whether a descriptor of ``face`` can be trusted: turned to the camera, big enough."""
    eyes = float(np.linalg.norm(face.kps[1] - face.kps[0]))
    return eyes >= MIN_EYE_PX and abs(face_yaw(face)) <= max_yaw


def face_yaw(face: Face) -> float:
    """The head's turn in degrees (0 = facing the camera; the sign is the side), from the
    mesh's depth at the two sides of the face; 0 for a face without a mesh."""
    if face.mesh is None or face.depth is None:
        return 0.0
    dx = float(face.mesh[454, 0] - face.mesh[234, 0])
    dz = float(face.depth[454] - face.depth[234])
    return math.degrees(math.atan2(dz, dx))


def face_signature(frame: np.ndarray, face: Face) -> tuple[np.ndarray, np.ndarray] | None:
    """The frame's colours at the face's mesh points over the face's brightness (468, 3),
    and how squarely each point faces the camera (468,); None without a mesh."""
    if face.mesh is None or face.depth is None:
        return None
    height, width = frame.shape[:2]
    x0, y0, x1, y1 = (float(v) for v in face.box)
    left, top = max(0, int(x0) - 2), max(0, int(y0) - 2)
    right, bottom = min(width, int(x1) + 3), min(height, int(y1) + 3)
    if right - left < 4 or bottom - top < 4:
        return None
    # each point reads a box about 1/SIGNATURE_PX of the face wide (noise and small moves
    # average out); a box filter costs the same whatever its size
    side = max(3, int(round(3 * (x1 - x0) / SIGNATURE_PX)) | 1)
    crop = cv2.blur(frame[top:bottom, left:right], (side, side))
    xs = np.clip(np.rint(face.mesh[:, 0] - left), 0, right - left - 1).astype(np.intp)
    ys = np.clip(np.rint(face.mesh[:, 1] - top), 0, bottom - top - 1).astype(np.intp)
    colours = crop[ys, xs].astype(np.float32)
    brightness = float(np.median(colours.mean(1)))
    return colours / max(brightness, 1.0), _point_facing(face.mesh, face.depth)


def _point_facing(mesh: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """(468,) cosine between each point's normal (its triangles' summed) and the view."""
    triangles, incidence = _triangles()
    points = np.concatenate([mesh, depth[:, None]], 1).astype(np.float32)
    a = points[triangles[:, 0]]
    u, v = points[triangles[:, 1]] - a, points[triangles[:, 2]] - a
    normals = np.stack([u[:, 1] * v[:, 2] - u[:, 2] * v[:, 1], u[:, 2] * v[:, 0] - u[:, 0] * v[:, 2],
                        u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]], 1)
    summed = incidence @ normals
    return (-summed[:, 2] / np.maximum(np.linalg.norm(summed, axis=1), 1e-9)).astype(np.float32)


@lru_cache(maxsize=1)
def _triangles() -> tuple[np.ndarray, scipy.sparse.csr_matrix]:
    """The canonical mesh's triangles and its (468, triangles) point-triangle incidence."""
    triangles = canonical_mesh().triangles
    rows = triangles.reshape(-1)
    columns = np.repeat(np.arange(len(triangles)), 3)
    incidence = scipy.sparse.csr_matrix((np.ones(len(rows), np.float32), (rows, columns)), shape=(468, len(triangles)))
    return triangles, incidence


def _thumbnail(frame: np.ndarray, box: np.ndarray) -> np.ndarray:
    height, width = frame.shape[:2]
    x0, y0, x1, y1 = (float(v) for v in box)
    side = max(x1 - x0, y1 - y0) * 1.5
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    left, top = int(max(0, cx - side / 2)), int(max(0, cy - side / 2))
    right, bottom = int(min(width, cx + side / 2)), int(min(height, cy + side / 2))
    crop = frame[top:bottom, left:right]
    if crop.size == 0:
        crop = frame
    scale = min(1.0, THUMBNAIL_PX / max(crop.shape[:2]))
    size = (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale)))
    return cv2.resize(crop, size, interpolation=cv2.INTER_AREA) if scale < 1 else crop.copy()


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    low, high = np.maximum(a[:2], b[:2]), np.minimum(a[2:], b[2:])
    inter = float(np.prod(np.clip(high - low, 0, None)))
    union = float(np.prod(a[2:] - a[:2]) + np.prod(b[2:] - b[:2])) - inter
    return inter / union if union > 0 else 0.0


def person_number(person_id: str) -> int:
    """person-12 -> 12 (people are numbered as they are first seen); 0 for any other id."""
    head, _, tail = person_id.rpartition("-")
    return int(tail) if head == "person" and tail.isdigit() else 0
