"""``swapcast jobs submit | status | wait | cancel``: offline jobs over a server's HTTP API.

Talks to a node or the gateway (``--server``, default http://127.0.0.1:8080); the work
itself is done by ``swapcast worker`` processes. ``submit`` prints the new job's id on
stdout so scripts can capture it; ``wait`` (and ``submit --wait``) show a progress bar and
can download the result. A job that fails or is cancelled while waited for ends the
command with its reason and exit code 2, like any other error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Self

import aiohttp
from tqdm import tqdm

from gpu.errors import SwapcastError
from signaling.jobs.model import FINAL_STATES, PRIORITIES

DEFAULT_SERVER = "http://127.0.0.1:8080"
POLL_S = 0.5


def register(commands: argparse._SubParsersAction) -> None:
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument("--server", metavar="URL", default=DEFAULT_SERVER, help=f"node or gateway (default {DEFAULT_SERVER})")
    server.add_argument("--token", default=os.environ.get("SWAPCAST_TOKEN"),
                        help="bearer token (JWT; default $SWAPCAST_TOKEN); jobs belong to its subject")
    waiting = argparse.ArgumentParser(add_help=False)
    waiting.add_argument("--output", metavar="FILE", help="download the finished video here")
    waiting.add_argument("--no-progress", dest="progress", action="store_false", help="no progress (neither the bar nor the periodic lines)")

    parser = commands.add_parser("jobs", help="offline video jobs: submit, status, wait, cancel")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    submit = actions.add_parser("submit", parents=[server, waiting], help="submit a video to be swapped")
    submit.add_argument("video", metavar="VIDEO", help="the video file to upload")
    face = submit.add_mutually_exclusive_group()
    face.add_argument("--face", metavar="ID", help="a stored or sample face id (e.g. astronaut); with --map: the face of "
                      "the people it does not name")
    face.add_argument("--source", metavar="IMAGE", help="a photo of the face to put in (uploaded with the job)")
    submit.add_argument("--stored", action="store_true", help="VIDEO is a path inside the server's job storage: no upload")
    submit.add_argument("--priority", choices=PRIORITIES, default="normal", help="queue priority (default normal)")
    submit.add_argument("--webhook", metavar="URL", help="POSTed (HMAC-signed) when the job completes or fails")
    submit.add_argument("--idempotency-key", metavar="KEY", help="submitting again with the same key returns the same job")
    submit.add_argument("--map", action="append", default=[], metavar="REF=FACE",
                        help="map faces: the person of reference face REF (a face id: a photo of them) wears face FACE "
                             "(a face id, or 'keep'); repeatable")
    submit.add_argument("--unmapped", choices=["source", "keep"], help="with --map: people it does not name wear --face/"
                        "--source, or stay as they are (keep; the default without --face or --source)")
    submit.add_argument("--wait", action="store_true", help="wait for the job to end, with a progress bar")
    submit.set_defaults(run=_submit)
    status = actions.add_parser("status", parents=[server], help="show a job's state and progress")
    status.add_argument("job_id", metavar="JOB")
    status.add_argument("--json", action="store_true", help="print the job as JSON")
    status.set_defaults(run=_status)
    wait = actions.add_parser("wait", parents=[server, waiting], help="wait for a job to end, with a progress bar")
    wait.add_argument("job_id", metavar="JOB")
    wait.set_defaults(run=_wait)
    cancel = actions.add_parser("cancel", parents=[server], help="cancel a job")
    cancel.add_argument("job_id", metavar="JOB")
    cancel.set_defaults(run=_cancel)


class _Api:
    """The jobs API of one server; HTTP errors become ``SwapcastError`` with the server's reason."""

    def __init__(self, server: str, token: str | None) -> None:
        self.base = server.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self.session = aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            async with self.session.request(method, self.base + path, **kwargs) as response:
                if response.status >= 400:
                    raise SwapcastError(f"{response.status} {await _reason(response)}")
                return await response.json()
        except aiohttp.ClientError as exc:
            raise SwapcastError(f"cannot reach {self.base}: {exc}") from None

    async def download(self, job_id: str, destination: Path) -> None:
        handle, name = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".part", dir=destination.parent)
        try:
            with os.fdopen(handle, "wb") as file:
                async with self.session.get(f"{self.base}/api/v1/jobs/{job_id}/output") as response:
                    if response.status >= 400:
                        raise SwapcastError(f"{response.status} {await _reason(response)}")
                    async for block in response.content.iter_chunked(1 << 20):
                        file.write(block)
            os.replace(name, destination)
        except aiohttp.ClientError as exc:
            raise SwapcastError(f"download from {self.base} failed: {exc}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)


async def _reason(response: aiohttp.ClientResponse) -> str:
    with contextlib.suppress(ValueError, KeyError, TypeError, aiohttp.ContentTypeError):
        return str((await response.json())["error"])
    return response.reason or "error"


def _summary(job: dict[str, Any]) -> str:
    chunks = job["chunks"]
    text = f"{job['id']}: {job['state']} {job['progress']:.0f}% (chunks {chunks['done']}/{chunks['total']})"
    return text + (f": {job['error']}" if job.get("error") else "")


def _submit(args: argparse.Namespace) -> int:
    video = Path(args.video)
    if not args.stored and not video.is_file():
        raise SwapcastError(f"video {video}: no such file")
    if args.source and not Path(args.source).is_file():
        raise SwapcastError(f"source {args.source}: no such file")
    if not (args.face or args.source or args.map):
        raise SwapcastError("give --face ID or --source IMAGE (or --map REF=FACE per person)")
    args.faces_map = _faces_map(args.map)
    if args.unmapped is None and args.map and not (args.face or args.source):
        args.unmapped = "keep"
    _check_output(args.output)
    with contextlib.ExitStack() as files:
        uploads = {} if args.stored else {"video": (files.enter_context(video.open("rb")), video.name)}
        if args.source:
            uploads["source"] = (files.enter_context(Path(args.source).open("rb")), Path(args.source).name)
        return asyncio.run(_submit_async(args, uploads))


async def _submit_async(args: argparse.Namespace, uploads: dict[str, tuple[BinaryIO, str]]) -> int:
    """POST the job: text fields, ``path`` for a stored video, the open files as uploads."""
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}
    fields = {"priority": args.priority, "face_id": args.face, "webhook_url": args.webhook,
              "path": args.video if args.stored else None, "unmapped": args.unmapped,
              "faces_map": json.dumps(args.faces_map) if args.faces_map else None}
    async with _Api(args.server, args.token) as api:
        form = aiohttp.FormData()
        for name, value in fields.items():
            if value is not None:
                form.add_field(name, value)
        for name, (file, filename) in uploads.items():
            form.add_field(name, file, filename=filename)
        job = await api.call("POST", "/api/v1/jobs", data=form, headers=headers)
        print(job["id"], flush=True)
        if args.wait:
            await _wait_for(api, job["id"], args.output, args.progress)
    return 0


def _faces_map(entries: list[str]) -> dict[str, str]:
    """``--map REF=FACE`` entries (face ids; the server checks they exist) as the job's faces_map."""
    mapping: dict[str, str] = {}
    for entry in entries:
        reference, sep, face = (part.strip() for part in entry.partition("="))
        if not sep or not reference or not face:
            raise SwapcastError(f"--map {entry!r}: expected REF=FACE (face ids, or FACE 'keep')")
        mapping[reference] = face
    return mapping


def _status(args: argparse.Namespace) -> int:
    async def status() -> dict[str, Any]:
        async with _Api(args.server, args.token) as api:
            return await api.call("GET", f"/api/v1/jobs/{args.job_id}")

    job = asyncio.run(status())
    print(json.dumps(job, indent=2) if args.json else _summary(job))
    return 0


def _wait(args: argparse.Namespace) -> int:
    _check_output(args.output)

    async def wait() -> None:
        async with _Api(args.server, args.token) as api:
            await _wait_for(api, args.job_id, args.output, args.progress)

    asyncio.run(wait())
    return 0


def _cancel(args: argparse.Namespace) -> int:
    async def cancel() -> dict[str, Any]:
        async with _Api(args.server, args.token) as api:
            return await api.call("DELETE", f"/api/v1/jobs/{args.job_id}")

    print(_summary(asyncio.run(cancel())))
    return 0


class JobProgress:
    """A job's progress on stderr: on a terminal a bar over its percent; elsewhere (a log, a
    pipe) a line whenever its state or its chunks done change, not a bar redrawn into the
    file every poll; nothing when not ``enabled``. A context manager; ``show(job)`` moves it."""

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label, self.enabled = label, enabled
        self._bar: tqdm | None = None
        self._last_line: str | None = None

    def __enter__(self) -> Self:
        if self.enabled and sys.stderr.isatty():
            self._bar = tqdm(total=100, desc=self.label, file=sys.stderr, dynamic_ncols=True,
                             bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}]")
        return self

    def show(self, job: dict[str, Any]) -> None:
        chunks = job["chunks"]
        line = f"{self.label}: {job['state']}, chunks {chunks['done']}/{chunks['total']}"
        if self._bar is not None:
            self._bar.set_description_str(line, refresh=False)
            self._bar.n = job["progress"]
            self._bar.refresh()
        elif self.enabled and line != self._last_line:
            self._last_line = line
            print(f"{line} ({job['progress']:.0f}%)", file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def _check_output(output: str | None) -> None:
    if output is not None and not Path(output).parent.is_dir():
        raise SwapcastError(f"output {output}: folder {Path(output).parent} does not exist")


async def _wait_for(api: _Api, job_id: str, output: str | None, progress: bool) -> None:
    """Poll until the job ends; a bar shows its progress. Completed: print the summary and
    download ``output``; failed or cancelled: ``SwapcastError`` with the reason."""
    with JobProgress(job_id, enabled=progress) as bar:
        while True:
            job = await api.call("GET", f"/api/v1/jobs/{job_id}")
            bar.show(job)
            if job["state"] in FINAL_STATES:
                break
            await asyncio.sleep(POLL_S)
    if job["state"] != "completed":
        raise SwapcastError(f"job {job_id} {job['state']}" + (f": {job['error']}" if job.get("error") else ""))
    print(_summary(job))
    if output is not None:
        await api.download(job_id, Path(output))
        print(f"{output}: written")
