"""gpu.analysis.people: who each tracked face is, on drawn scenes whose people the test
controls (where each one is, what their face looks like, what a descriptor of them says)."""

from __future__ import annotations

import cv2
import numpy as np
from gpu.analysis import people as people_module
from gpu.analysis.face_mesh import face_from_mesh, new_track_id
from gpu.analysis.people import NEW_AFTER, RETRY_FRAMES, People, Person, face_signature
from gpu.models.canonical_mesh import canonical_mesh
from gpu.types import Face

SIZE = (480, 640)
IDENTITY = {  # dlib-like descriptors: A and B 0.8 apart, C 0.65 from A (near, not near enough)
    "A": np.zeros(128, np.float32),
    "B": np.eye(128, dtype=np.float32)[0] * 0.8,
    "C": np.eye(128, dtype=np.float32)[1] * 0.65,
}
LOOKS = {"A": (200, 120, 90), "B": (70, 140, 210), "C": (150, 190, 80)}  # each person's skin, and a pattern on it


class Scene:
    """People drawn at places; ``describe`` answers as dlib would for whoever is at a face."""

    def __init__(self) -> None:
        self.places: dict[str, tuple[float, float]] = {}
        self.turned: set[str] = set()  # no frontal view: no descriptor
        self.calls = 0

    def frame(self) -> np.ndarray:
        image = np.full((*SIZE, 3), 40, np.uint8)
        for person, (x, y) in self.places.items():
            face = posed(x, y, None)
            hull = cv2.convexHull(face.mesh.astype(np.int32))
            cv2.fillConvexPoly(image, hull, LOOKS[person])
            for row in range(3):  # a pattern of its own: brows, eyes, mouth of the person's colours
                shade = tuple(int(c * (0.4 + 0.2 * row)) for c in LOOKS[person][::-1 if row % 2 else 1])
                cv2.rectangle(image, (int(x - 30), int(y - 40 + 30 * row)), (int(x + 30), int(y - 30 + 30 * row)), shade, -1)
        return image

    def describe(self, frame: np.ndarray, face: Face) -> np.ndarray | None:
        self.calls += 1
        centre = face.center
        person = min(self.places, key=lambda p: np.hypot(*(np.array(self.places[p]) - centre)))
        return None if person in self.turned else IDENTITY[person]


class Ids:
    """Track ids as the trackers hand them out (process-unique): ``ids[1]``, ``ids[2]``, ..."""

    def __init__(self) -> None:
        self._ids: dict[int, int] = {}

    def __getitem__(self, n: int) -> int:
        return self._ids.setdefault(n, new_track_id())


def posed(x: float, y: float, track_id: int | None, width: float = 110.0) -> Face:
    """A frontal face of the canonical mesh, ``width`` px wide, centred at (x, y)."""
    vertices = canonical_mesh().vertices.astype(np.float64)
    scale = width / np.ptp(vertices[:, 0])
    centre = (vertices.min(0) + vertices.max(0)) / 2
    points = (vertices - centre) * scale + [x, y, 0.0]
    return face_from_mesh(points.astype(np.float32), track_id)


def step(people: People, scene: Scene, tracks: dict[int, str], t: float) -> dict[int, str | None]:
    """One frame: each track id on the face of the person the scene puts it on."""
    frame = scene.frame()
    faces = [posed(*scene.places[who], track) for track, who in tracks.items()]
    return people.update(frame, faces, t)


def test_each_person_gets_an_id_and_keeps_it_when_the_tracker_finds_them_again():
    T = Ids()
    scene = Scene()
    scene.places = {"A": (180, 240), "B": (460, 240)}
    people = People(scene.describe)
    first = step(people, scene, {T[1]: "A", T[2]: "B"}, 0.0)
    assert first == {T[1]: "person-1", T[2]: "person-2"}
    for t in range(1, 30):
        assert step(people, scene, {T[1]: "A", T[2]: "B"}, t / 30) == first
    assert scene.calls == 2  # one descriptor per track, none per frame
    # B leaves, and comes back as a new track somewhere else: the same person
    del scene.places["B"]
    step(people, scene, {T[1]: "A"}, 1.0)
    scene.places["B"] = (320, 200)
    again = step(people, scene, {T[1]: "A", T[7]: "B"}, 1.1)
    assert again == {T[1]: "person-1", T[7]: "person-2"}
    assert [p.id for p in people.snapshot()] == ["person-1", "person-2"]
    assert all(p.on_screen for p in people.snapshot())


def test_a_track_that_slides_onto_another_face_is_in_doubt_then_becomes_that_person():
    T = Ids()
    scene = Scene()
    scene.places = {"A": (180, 240), "B": (460, 240)}
    people = People(scene.describe)
    step(people, scene, {T[1]: "A", T[2]: "B"}, 0.0)
    state_before = people.state_id(T[1])
    # the tracker lost B's track and moved A's track onto B (A left): track 1 now shows B
    del scene.places["A"]
    scene.turned.add("B")  # ... and B is turned away: no descriptor yet
    frame = scene.frame()
    answer = people.update(frame, [posed(*scene.places["B"], T[1])], 0.1)
    assert answer == {T[1]: None}  # never A's source on B's face
    scene.turned.clear()
    for t in range(2, 2 + RETRY_FRAMES + 1):
        answer = people.update(scene.frame(), [posed(*scene.places["B"], T[1])], t / 30)
    assert answer == {T[1]: "person-2"}
    assert people.state_id(T[1]) != state_before  # per-track state starts again for another person
    assert not people.same_state(state_before, people.state_id(T[1]))


def test_a_stream_nobody_maps_describes_new_tracks_only():
    """Without a map the swap never waits on people: a doubt or a 30 s recheck would only
    stall the live thread (dlib holds the GIL), so they wait until a map names someone."""
    T = Ids()
    scene = Scene()
    scene.places = {"A": (180, 240)}
    people = People(scene.describe, per_frame=1)
    people.settle_doubts = False
    assert step(people, scene, {T[1]: "A"}, 0.0) == {T[1]: "person-1"}
    late = people_module.RECHECK_S + 1.0
    for frame in range(RETRY_FRAMES + 2):
        step(people, scene, {T[1]: "A"}, late + frame / 30)
    assert scene.calls == 1 and people.reasons == {"new": 1}
    people.settle_doubts = True  # a map names someone now: the recheck that was due runs
    step(people, scene, {T[1]: "A"}, late + 1.0)
    assert scene.calls == 2 and people.reasons == {"new": 1, "recheck": 1}


def test_two_faces_never_share_one_person():
    T = Ids()
    scene = Scene()
    scene.places = {"A": (180, 240), "B": (460, 240)}
    people = People(scene.describe)
    step(people, scene, {T[1]: "A"}, 0.0)
    IDENTITY_B = IDENTITY["B"]
    try:
        IDENTITY["B"] = IDENTITY["A"] + 0.01  # a twin: dlib cannot tell them apart
        answer = step(people, scene, {T[1]: "A", T[2]: "B"}, 0.1)
    finally:
        IDENTITY["B"] = IDENTITY_B
    assert answer[T[1]] == "person-1" and answer[T[2]] not in (None, "person-1")


def test_a_face_dlib_cannot_describe_stays_unknown_and_is_tried_again():
    T = Ids()
    scene = Scene()
    scene.places = {"A": (180, 240)}
    scene.turned.add("A")
    people = People(scene.describe)
    assert step(people, scene, {T[1]: "A"}, 0.0) == {T[1]: None}
    for t in range(1, RETRY_FRAMES):
        assert step(people, scene, {T[1]: "A"}, t / 30) == {T[1]: None}
    assert scene.calls == 1  # not every frame
    scene.turned.clear()
    answers = [step(people, scene, {T[1]: "A"}, t / 30) for t in range(RETRY_FRAMES, RETRY_FRAMES + 3)]
    assert answers[-1] == {T[1]: "person-1"}


def test_live_streams_describe_one_face_a_frame():
    T = Ids()
    scene = Scene()
    scene.places = {"A": (180, 240), "B": (460, 240)}
    people = People(scene.describe, per_frame=1)
    first = step(people, scene, {T[1]: "A", T[2]: "B"}, 0.0)
    assert sorted(v is None for v in first.values()) == [False, True]
    assert scene.calls == 1
    second = step(people, scene, {T[1]: "A", T[2]: "B"}, 1 / 30)
    assert set(second.values()) == {"person-1", "person-2"}


def test_someone_near_a_known_person_becomes_new_only_when_another_view_agrees():
    T = Ids()
    scene = Scene()
    scene.places = {"A": (180, 240)}
    people = People(scene.describe)
    step(people, scene, {T[1]: "A"}, 0.0)
    scene.places = {"C": (460, 240)}  # A left; C is 0.65 from A: A half hidden, or someone else?
    answers = [step(people, scene, {T[2]: "C"}, t / 30)[T[2]] for t in range(1, 8)]
    assert answers[0] is None
    assert answers[-1] == "person-2"
    assert scene.calls == 1 + NEW_AFTER
    # with A in the picture, a face beside A cannot be A: someone new at once
    scene.places = {"A": (180, 240), "C": (460, 240)}
    fresh = People(scene.describe)
    assert step(fresh, scene, {T[3]: "A", T[4]: "C"}, 0.0) == {T[3]: "person-1", T[4]: "person-2"}


def test_a_scan_clusters_one_person_split_in_two_and_keeps_people_seen_together_apart():
    T = Ids()
    near = Person("person-1", [IDENTITY["A"]], first_seen=0.0, last_seen=1.0, frames=30)
    split = Person("person-2", [IDENTITY["A"] + 0.02], first_seen=2.0, last_seen=3.0, frames=30)
    other = Person("person-3", [IDENTITY["B"]], first_seen=0.5, last_seen=3.0, frames=60)
    people = People(lambda *_: None, known=[near, split, other])
    merged = people.consolidated()
    assert [(p.id, p.frames) for p in merged] == [("person-1", 60), ("person-2", 60)]
    assert np.allclose(merged[1].exemplars[0], IDENTITY["B"])
    # seen in one frame: two people however alike
    scene = Scene()
    scene.places = {"A": (180, 240), "B": (460, 240)}
    people = People(scene.describe)
    IDENTITY_B = IDENTITY["B"]
    try:
        IDENTITY["B"] = IDENTITY["A"] + 0.05
        step(people, scene, {T[1]: "A", T[2]: "B"}, 0.0)
    finally:
        IDENTITY["B"] = IDENTITY_B
    assert len(people.consolidated()) == 2


def test_stills_name_each_face_once():
    T = Ids()
    scene = Scene()
    scene.places = {"A": (180, 240), "B": (460, 240)}
    people = People(scene.describe)
    faces = [posed(*scene.places["A"], None), posed(*scene.places["B"], None)]
    assert people.identify_still(scene.frame(), faces) == ["person-1", "person-2"]


def test_the_signature_tells_people_apart_and_not_a_face_from_itself_moved():
    T = Ids()
    scene = Scene()
    scene.places = {"A": (180, 240), "B": (460, 240)}
    frame = scene.frame()
    a, facing = face_signature(frame, posed(180, 240, T[1]))
    a_moved = face_signature(frame, posed(181, 241, T[1]))[0]
    b = face_signature(frame, posed(460, 240, T[2]))[0]
    change = lambda x, y: float(np.median(np.linalg.norm(x - y, axis=1)[facing > 0.5]))  # noqa: E731
    assert change(a, a_moved) < people_module.SIGNATURE_JUMP / 2
    assert change(a, b) > 2 * people_module.SIGNATURE_JUMP
    assert face_signature(frame, Face(box=np.array([0, 0, 10, 10], np.float32), kps=np.zeros((5, 2), np.float32))) is None


def test_the_version_moves_only_when_someone_is_learnt():
    T = Ids()
    scene = Scene()
    scene.places = {"A": (180, 240)}
    people = People(scene.describe)
    before = people.version
    step(people, scene, {T[1]: "A"}, 0.0)
    learnt = people.version
    step(people, scene, {T[1]: "A"}, 1 / 30)
    assert before < learnt == people.version


def test_a_long_stream_remembers_a_bounded_number_of_people(monkeypatch):
    monkeypatch.setattr(people_module, "MAX_PEOPLE", 3)
    T = Ids()
    people = People(lambda frame, face: np.eye(128, dtype=np.float32)[face.track_id % 128], per_frame=None)
    frame = np.zeros((*SIZE, 3), np.uint8)
    for n in range(6):  # six strangers, one after the other
        people.update(frame, [posed(320, 240, T[n])], n / 30)
    listed = [p.id for p in people.snapshot()]
    assert listed == ["person-4", "person-5", "person-6"]
