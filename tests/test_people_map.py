"""streamer.pipeline.people_map: who wears what, and map faces end to end on the people set
(two and three people crossing, leaving and coming back, turning away; rendered from the
sample faces, see swapcast.benchmarks.people_clips) through one stream's FrameSwapper."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.analysis.identity import identity_distance
from gpu.analysis.people import PersonView
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.pipeline.people_map import KEEP, MappedSource, PeopleMap, Reference, describe_people, is_person_id
from swapcast.benchmarks.mapping import SourceSet, score_clip
from swapcast.benchmarks.people_clips import DISTINCT, PEOPLE, clip_by_name, photo_of, third_person

A, B = np.zeros(128, np.float32), np.eye(128, dtype=np.float32)[0] * 0.8


def view(person_id: str, *identity: np.ndarray, on_screen: bool = True) -> PersonView:
    return PersonView(person_id, 0.0, 1.0, 1_790_000_000.0, 30, on_screen, None, tuple(identity))


def wears(label: str) -> MappedSource:
    return MappedSource(label, source=None)  # type: ignore[arg-type]  # only the label matters here


def test_people_are_named_by_id_first_then_each_reference_names_its_nearest_person():
    near_a, nearer_a = view("person-1", A + 0.2), view("person-2", A + 0.05)
    b = view("person-3", B)
    mapping = PeopleMap(people={"person-3": None},
                        references=(Reference("ref-a", A, wears("face-x")), Reference("ref-b", B, wears("face-y"))))
    named = mapping.named([near_a, nearer_a, b])
    assert named == {"person-3": None, "person-2": wears("face-x")}  # B is named by id (keep), not by its photo
    assert mapping.describe() == {"person-3": KEEP, "ref-a": "face-x", "ref-b": "face-y"}
    far = PeopleMap(references=(Reference("ref-b", B, wears("face-y")),), threshold=0.5)
    assert far.named([view("person-1", B + 0.05)]) == {}  # 0.56 away: over the threshold
    assert is_person_id("person-12") and not is_person_id("person-x") and not is_person_id("u-person-1")


def test_the_listing_says_what_each_person_wears_and_where_their_thumbnail_is():
    mapping = PeopleMap(people={"person-1": wears("grace_hopper")}, keep_unmapped=True)
    rows = describe_people([view("person-2", B, on_screen=False), view("person-1", A)], mapping, "/x/people")
    assert [(r["id"], r["wears"], r["on_screen"]) for r in rows] == [("person-1", "grace_hopper", True),
                                                                       ("person-2", KEEP, False)]
    assert rows[0]["since"] == "2026-09-21T14:13:20Z" and rows[0]["thumbnail"] is None
    assert describe_people([view("person-1", A)], None, "/x")[0]["wears"] == "source"


def test_people_on_screen_keep_their_places_in_the_listing():
    """Two people in one frame are last seen a frame apart as the stream goes on: listed by
    when each was last seen they swapped places from one listing to the next."""
    def seen(person_id: str, first: float, last: float, on_screen: bool = True) -> PersonView:
        return PersonView(person_id, first, last, 1_790_000_000.0, 30, on_screen, None, (A,))

    for later in ("person-1", "person-10"):
        last = {"person-1": 4.9, "person-10": 4.9, later: 5.0}
        people = [seen("person-10", 2.0, last["person-10"]), seen("person-1", 0.5, last["person-1"]),
                  seen("person-3", 1.0, 3.0, on_screen=False), seen("person-4", 1.5, 4.0, on_screen=False)]
        assert [r["id"] for r in describe_people(people, None, "/x")] == ["person-1", "person-10", "person-4", "person-3"]


def test_the_third_person_is_someone_else(identity_of):
    third = third_person(check=lambda a, b: identity_distance(identity_of(a), identity_of(b)))
    distances = {real: identity_distance(identity_of(third), identity_of(photo_of(real))) for real in PEOPLE[:2]}
    print("third person: dlib distance to", distances)
    assert min(distances.values()) > DISTINCT


@pytest.fixture(scope="module")
def sources(engine):
    return SourceSet(engine)


@pytest.mark.parametrize(("name", "live"), [("three", False), ("cross", True)])
def test_each_person_wears_their_own_source_never_anothers(engine, sources, name, live):
    """Three people, one turning away and back, one walking in from the edge and in front
    of another, as a file runs (every descriptor due is computed); two people crossing (one
    passing in front of the other's face) as a live stream runs (one descriptor a frame).
    ``bench quality --only mapping`` runs every clip both ways."""
    clip = clip_by_name(name, quick=True)
    score = score_clip(engine, clip, sources, live=live, identity_every=None)
    rows = {p.person: (p.own, p.others, p.present, p.covered) for p in score.people}
    print(f"{name} {'live' if live else 'file'}: (own, another's, present, covered) {rows}; stray {score.stray}; "
          f"{score.descriptors} descriptors, identity stage {score.identity_ms / max(score.faces, 1):.2f} ms/face")
    for person in score.people:
        assert person.others == 0, f"{person.person} wore someone else's face in {person.others} frames"
        assert person.correct is not None and person.correct >= 0.98
        assert person.coverage is not None and person.coverage >= 0.85
    assert score.stray == 0
    assert score.descriptors <= 4 * len(clip.people)  # at starts and doubts, not per frame


def test_a_map_that_keeps_everyone_swaps_nobody_and_unnamed_people_wear_the_source(engine, sources):
    clip = clip_by_name("cross", quick=True)
    astronaut = sources.sources["astronaut"]
    keep_all = PeopleMap(references=(Reference("astronaut", sources.identities["astronaut"], None),), keep_unmapped=True)
    from gpu.analysis.people import People

    swapper = FrameSwapper(engine, astronaut.source, people=People(engine.frontal_identity), mapping=keep_all, offline=True)
    rest = FrameSwapper(engine, astronaut.source, people=People(engine.frontal_identity), offline=True,
                        mapping=PeopleMap(references=(Reference("astronaut", sources.identities["astronaut"], None),)))
    try:
        for index in range(0, 30, 3):
            assert swapper.process(clip.frames[index].copy(), index / 30).faces_swapped == 0
            rest.process(clip.frames[index].copy(), index / 30)
            worn = {label for _, _, label in rest.last_wearing}
            assert worn <= {"source"}  # grace wears the stream's own source; the astronaut is kept
        assert worn == {"source"}
    finally:
        swapper.close()
        rest.close()


def test_map_faces_picture(engine, sources, tmp_path):
    """The guide's picture (docs/guides/map-faces.md): three people in one photo, each named by
    a photo of them; two wear someone else's face, the third stays. Checked: the kept face is
    untouched, the other two come out nearer the face they wear than their own."""
    from gpu.analysis.people import People
    from picture_sheet import save_sheet

    clip = clip_by_name("three", quick=True)
    index = max(range(len(clip.frames)), key=lambda i: (len(clip.truth[i]), min(a.visible for a in clip.truth[i])))
    frame = clip.frames[index]
    plan = {"astronaut": "grace_hopper", "grace_hopper": "astronaut", "third": None}
    mapping = PeopleMap(references=tuple(
        Reference(person, sources.identities[person], sources.sources[wear] if wear else None) for person, wear in plan.items()))
    out = frame.copy()
    swapper = FrameSwapper(engine, None, people=People(engine.frontal_identity), mapping=mapping, offline=True)
    try:
        assert swapper.process_still(out).faces_swapped == 2
    finally:
        swapper.close()
    for spot in clip.truth[index]:
        x0, y0, x1, y1 = (max(0, int(v)) for v in spot.box)
        change = float(np.abs(out[y0:y1, x0:x1].astype(np.float32) - frame[y0:y1, x0:x1]).mean())
        if plan[spot.person] is None:
            assert change < 1.0, f"{spot.person} was to stay as they are (changed {change:.1f})"
        else:
            found = engine.identity(out, spot.face())
            worn, own = sources.identities[plan[spot.person]], sources.identities[spot.person]
            assert identity_distance(found, worn) < identity_distance(found, own), spot.person
    save_sheet("map-faces.png", [("before", frame), ("after: two mapped, one kept", out)], tmp_path)
