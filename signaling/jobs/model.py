"""What an offline job is, as the queue stores it and the API shows it.

A job is one Redis hash of text fields (so Lua scripts can read and change single fields
without decoding a document); ``Job`` is its typed view. Work on a job is a sequence of
tasks on its priority's stream: one ``split``, one ``chunk`` per chunk, one ``finalise``
and, when a webhook is set, one ``notify``. Progress counts those steps, so a job moves
from 0 to 100 % as the split, every chunk and the finalisation finish.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

# pending: queued, not split yet; processing: split into chunks that are being rendered;
# completed / failed / cancelled are final.
JobState = Literal["pending", "processing", "completed", "failed", "cancelled"]
FINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

Priority = Literal["high", "normal", "low"]
PRIORITIES: tuple[Priority, ...] = get_args(Priority)  # the order workers serve them in

TaskKind = Literal["split", "chunk", "finalise", "notify"]


@dataclass(frozen=True)
class Chunk:
    """One piece of the input, cut at keyframes without re-encoding. ``path`` is relative to
    the job storage, like every path in a job, so hosts may mount the storage anywhere."""

    index: int
    path: str
    frames: int
    start_s: float
    duration_s: float

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Chunk:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Task:
    """A stream entry a worker holds: ``stream`` and ``entry_id`` identify it for
    acknowledgement and lease renewal; ``job_id``/``kind``/``index`` say what to do."""

    stream: str
    entry_id: str
    job_id: str
    kind: TaskKind
    index: int | None = None

    @property
    def name(self) -> str:
        """The task within its job, e.g. ``chunk:3`` (attempt and error counters use it)."""
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    def describe(self) -> str:
        return f"chunk {self.index}" if self.kind == "chunk" else f"the {self.kind} step"


@dataclass(frozen=True)
class Job:
    id: str
    state: JobState
    priority: Priority
    input_path: str  # relative to the job storage
    input_name: str  # the uploaded file's name, for people and the output's name
    face_id: str | None
    source_path: str | None  # an uploaded source photo, relative to the job storage
    webhook_url: str | None
    idempotency_key: str | None
    created: float
    updated: float
    owner: str = ""  # the submitting token's subject ("" when the API runs without auth)
    finished: float | None = None
    error: str | None = None
    chunks_total: int = 0
    chunks_done: int = 0
    split_done: bool = False
    frames: int | None = None  # the input's video frames, counted when it is split
    duration_s: float | None = None  # the input's video duration
    frame_s: float | None = None  # one frame interval: the duration check's tolerance
    has_audio: bool = False
    output_path: str | None = None  # relative to the job storage, once completed
    webhook_status: str | None = None
    webhook_unrestricted: bool = False  # submitted by an admin (or without auth): no push policy
    faces_map: str | None = None  # map faces: JSON {reference face id: face id | "keep"}
    unmapped: str = "source"  # people the map does not name: the job's face ("source") or kept ("keep")

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def progress(self) -> float:
        """Percent of the job's steps done: the split, each chunk, the finalisation."""
        if self.state == "completed":
            return 100.0
        if not self.split_done:
            return 0.0
        steps = self.chunks_total + 2
        return round(100.0 * (1 + self.chunks_done) / steps, 1)

    def public(self) -> dict[str, Any]:
        """The job as the API shows it (no storage paths)."""
        return {
            "id": self.id,
            "state": self.state,
            "progress": self.progress,
            "error": self.error,
            "priority": self.priority,
            "face_id": self.face_id,
            "source": "upload" if self.source_path else "face_id" if self.face_id else None,
            "input": self.input_name,
            "chunks": {"total": self.chunks_total, "done": self.chunks_done},
            "frames": self.frames,
            "duration_s": self.duration_s,
            "has_audio": self.has_audio if self.split_done else None,
            "created": self.created,
            "updated": self.updated,
            "finished": self.finished,
            "output": f"/api/v1/jobs/{self.id}/output" if self.state == "completed" else None,
            "webhook_url": self.webhook_url,
            "webhook_status": self.webhook_status,
            "faces_map": json.loads(self.faces_map) if self.faces_map else {},
            "unmapped": self.unmapped,
        }

    def to_fields(self) -> dict[str, str]:
        """The hash fields of a new job (unset optional fields are left out)."""
        fields: dict[str, str] = {}
        for name, value in asdict(self).items():
            if value is None:
                continue
            fields[name] = ("1" if value else "0") if isinstance(value, bool) else str(value)
        return fields

    @classmethod
    def from_fields(cls, raw: dict[str, str]) -> Job:
        def number(name: str, kind: type = float) -> Any:
            return kind(raw[name]) if raw.get(name) not in (None, "") else None

        return cls(
            id=raw["id"],
            state=raw["state"],  # type: ignore[arg-type]
            priority=raw["priority"],  # type: ignore[arg-type]
            input_path=raw["input_path"],
            input_name=raw.get("input_name", ""),
            face_id=raw.get("face_id") or None,
            source_path=raw.get("source_path") or None,
            webhook_url=raw.get("webhook_url") or None,
            idempotency_key=raw.get("idempotency_key") or None,
            created=float(raw["created"]),
            updated=float(raw["updated"]),
            owner=raw.get("owner", ""),
            finished=number("finished"),
            error=raw.get("error") or None,
            chunks_total=number("chunks_total", int) or 0,
            chunks_done=number("chunks_done", int) or 0,
            split_done=raw.get("split_done") == "1",
            frames=number("frames", int),
            duration_s=number("duration_s"),
            frame_s=number("frame_s"),
            has_audio=raw.get("has_audio") == "1",
            output_path=raw.get("output_path") or None,
            webhook_status=raw.get("webhook_status") or None,
            webhook_unrestricted=raw.get("webhook_unrestricted") == "1",
            faces_map=raw.get("faces_map") or None,
            unmapped=raw.get("unmapped") or "source",
        )
