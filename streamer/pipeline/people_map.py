"""Which source face each person wears: ``{person: face | keep}`` with a default for the
people it does not name.

People are named two ways: by the id a session or a scan reported (``person-2``: only
within that session or file), or by a reference photo's identity (matched like
``face_selection: reference``, under ``reference_threshold``): what a stream key or a job
stores, since it holds across sessions and chunks. A reference names the one person
nearest to it (two people close to one photo: only the nearer wears its source).

This is the resolved form: face ids and photos already turned into registered sources by
whoever built it (the node's face library, the command line, a job's worker)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from gpu.analysis.identity import SAME_PERSON_DISTANCE
from gpu.analysis.people import PersonView, person_number
from gpu.engine import SourceFace

KEEP = "keep"  # what a person is mapped to who stays as they are
PERSON_PREFIX = "person-"


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a face id or a person id, as the options schema takes them


def is_face_id(name: str) -> bool:
    """A name the options schema takes as a face id (not ``keep``, not a person id)."""
    return name != KEEP and not is_person_id(name) and _NAME.fullmatch(name) is not None


def is_person_id(name: str) -> bool:
    """``person-N``: an id a session or a scan reported (else a reference or a face id)."""
    return name.startswith(PERSON_PREFIX) and name[len(PERSON_PREFIX):].isdigit()


@dataclass(frozen=True)
class MappedSource:
    """A source a person wears, with what names it (a face id, a photo's file name)."""

    label: str
    source: SourceFace = field(repr=False)


@dataclass(frozen=True)
class Reference:
    """A person named by a photo: its identity and what they wear (None: keep)."""

    label: str
    identity: np.ndarray = field(repr=False)
    wears: MappedSource | None


@dataclass(frozen=True)
class PeopleMap:
    people: Mapping[str, MappedSource | None] = field(default_factory=dict)  # person id -> source, None: keep
    references: tuple[Reference, ...] = ()
    keep_unmapped: bool = False  # people not named stay as they are (else: the stream's own source)
    threshold: float = SAME_PERSON_DISTANCE  # identity distance a reference matches a person under

    @property
    def names_people(self) -> bool:
        """Whether anyone is named (else every face wears the default: no identity needed)."""
        return bool(self.people or self.references)

    def named(self, people: list[PersonView]) -> dict[str, MappedSource | None]:
        """What each named person of ``people`` wears: by id first, else by the reference
        nearest to them (each reference names only its nearest person)."""
        out: dict[str, MappedSource | None] = {person.id: self.people[person.id] for person in people
                                               if person.id in self.people}
        for reference in self.references:
            distances = [(_distance(person, reference.identity), person.id) for person in people
                         if person.id not in self.people and person.identity]
            if distances:
                distance, nearest = min(distances)
                if distance < self.threshold and nearest not in out:
                    out[nearest] = reference.wears
        return out

    def describe(self) -> dict[str, str]:
        """The map as the API and logs show it: name -> face label or ``keep``."""
        out = {name: wears.label if wears is not None else KEEP for name, wears in self.people.items()}
        out.update({reference.label: reference.wears.label if reference.wears is not None else KEEP
                    for reference in self.references})
        return out


def _distance(person: PersonView, identity: np.ndarray) -> float:
    return min(float(np.linalg.norm(exemplar - identity)) for exemplar in person.identity)


def describe_people(people: list[PersonView], mapping: PeopleMap | None, thumbnails: str) -> list[dict]:
    """The people a stream has seen as the API lists them -- those on screen first, in the
    order they were first seen (two people in one frame swapped places from one listing to
    the next by a frame's difference in when each was last seen), then the others, most
    recently seen first: id, on screen now, since when (UTC), frames, what they wear (a face
    id, ``keep``, or ``source``: the stream's own face) and their thumbnail's path
    (``thumbnails``/<id>/thumbnail.jpg)."""
    named = mapping.named(people) if mapping is not None else {}
    keep_rest = mapping is not None and mapping.keep_unmapped
    out = []
    for person in sorted(people, key=_listing_order):
        if person.id in named:
            wears = named[person.id].label if named[person.id] is not None else KEEP
        else:
            wears = KEEP if keep_rest else "source"
        out.append({
            "id": person.id, "on_screen": person.on_screen, "since": _utc(person.since), "frames": person.frames,
            "first_seen_s": _seconds(person.first_seen), "last_seen_s": _seconds(person.last_seen), "wears": wears,
            "thumbnail": f"{thumbnails}/{person.id}/thumbnail.jpg" if person.thumbnail is not None else None,
        })
    return out


def _listing_order(person: PersonView) -> tuple:
    if person.on_screen:
        return (0, person.first_seen or 0.0, person_number(person.id))
    return (1, -(person.last_seen or 0.0), person_number(person.id))


def _utc(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
