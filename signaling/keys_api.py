"""Stream keys over the API: each user makes, lists and revokes their own; admins see all.

    GET    /api/v1/keys            [{key_id, name, face_id, owner, created, revoked, active, push, record, play_token}]
    POST   /api/v1/keys            {name, face_id, options?, push?: [rtmp://...], record?: path} -> 201 {..., key}
                                   (options.faces_map names people by reference photo: {face id: face id | "keep"})
                                   (a user's push destinations must pass the push policy: 400 saying why;
                                   409 past MAX_KEYS_PER_USER keys, their oldest revoked ones make room)
    DELETE /api/v1/keys/{key_id}   -> 204 (revoked; its publisher is refused from then on)

The secret key is in the 201 answer only (the store keeps its SHA-256). Checking the face
(that it exists and the caller may wear it) and the options is the node's business (it
knows faces and the swap schema): it passes ``check_face`` and ``check_options``, so this
module never touches models."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from signaling.auth import AuditLog, Principal
from signaling.auth.middleware import NotYours, principal
from signaling.http_input import BadInput, read_json_object
from signaling.push_policy import PushPolicy
from signaling.stream_keys import StreamKey, StreamKeyError, StreamKeyLimitError, StreamKeyStore, check_destination

KEYS_KEY = web.AppKey("stream_key_api", object)
_PERSON_ID = re.compile(r"person-\d+")
MAX_NAME = 80
MAX_KEYS_PER_USER = 64  # keys (active, or revoked and not yet replaced) one user holds in the store


class KeyApi:
    def __init__(self, store: StreamKeyStore, check_face: Callable[[str, Principal], Awaitable[None]],
                 check_options: Callable[[dict[str, Any]], None], audit: AuditLog,
                 push_policy: PushPolicy | None = None, max_keys_per_user: int = MAX_KEYS_PER_USER) -> None:
        self.store = store
        self.max_keys_per_user = max_keys_per_user
        self.check_face = check_face
        self.check_options = check_options
        self.audit = audit
        self.push_policy = push_policy or PushPolicy()  # users' destinations: public addresses only


def add_key_routes(app: web.Application, api: KeyApi) -> None:
    app[KEYS_KEY] = api
    app.router.add_get("/api/v1/keys", list_keys)
    app.router.add_post("/api/v1/keys", create_key)
    app.router.add_delete("/api/v1/keys/{key_id}", revoke_key)


def key_json(record: StreamKey) -> dict[str, Any]:
    return {
        "key_id": record.key_id, "name": record.stream.name, "face_id": record.stream.face_id,
        "owner": record.owner, "created": record.created, "revoked": record.revoked, "active": record.active,
        "push": list(record.stream.push), "record": record.stream.record, "options": record.stream.swap,
        "play_token": record.play_token,  # rtmp://host/live/<play_token> plays the swapped stream
    }


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


async def list_keys(request: web.Request) -> web.Response:
    api: KeyApi = request.app[KEYS_KEY]
    caller = principal(request)
    records = await asyncio.get_running_loop().run_in_executor(None, api.store.list)
    return web.json_response([key_json(r) for r in records if caller.may_access(r.owner)])


async def create_key(request: web.Request) -> web.Response:
    api: KeyApi = request.app[KEYS_KEY]
    caller = principal(request)
    try:
        body = await read_json_object(request, '{"name", "face_id", "options", "push", "record"}')
    except BadInput as exc:
        return _error(400, exc.reason)
    unknown = sorted(set(body) - {"name", "face_id", "options", "push", "record"})
    if unknown:
        return _error(400, f"unknown field(s) {', '.join(unknown)}")
    name, face_id = body.get("name"), body.get("face_id")
    options, push, record_to = body.get("options") or {}, body.get("push") or [], body.get("record")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        return _error(400, f"name is required (1 to {MAX_NAME} characters)")
    if not isinstance(face_id, str) or not face_id:
        return _error(400, "face_id is required (see GET /api/v1/faces)")
    if not isinstance(options, dict):
        return _error(400, "options must be a JSON object of swap settings")
    if not isinstance(push, list) or not all(isinstance(url, str) for url in push):
        return _error(400, "push must be a list of rtmp:// URLs")
    if record_to is not None and (not isinstance(record_to, str) or not caller.is_admin):
        return _error(403 if isinstance(record_to, str) else 400,
                      "record names a path on the server: admins only" if isinstance(record_to, str)
                      else "record must be a path")
    await api.check_face(face_id, caller)  # another user's face: 404, as for a missing one
    api.check_options(options)
    faces_map = options.get("faces_map") or {}
    if any(_PERSON_ID.fullmatch(person) for person in faces_map):
        return _error(400, "a stream key's faces_map names people by a reference photo's face id: a session's "
                           "person ids (person-2) do not outlive the session")
    for mapped in {*faces_map.keys(), *faces_map.values()} - {"keep"}:
        await api.check_face(mapped, caller)
    try:
        for url in push if not caller.is_admin else ():
            check_destination(url)
            await api.push_policy.check_new(url)
        key, record = await asyncio.get_running_loop().run_in_executor(None, lambda: api.store.add(
            name.strip(), face_id=face_id, swap=options, push=tuple(push), record=record_to, owner=caller.subject,
            push_unrestricted=caller.is_admin, max_per_owner=api.max_keys_per_user))
    except StreamKeyLimitError as exc:
        return _error(409, str(exc))
    except StreamKeyError as exc:
        return _error(400, str(exc))
    await api.audit.append(caller.subject, "key.create", record.key_id, name=record.stream.name, face_id=face_id)
    return web.json_response({**key_json(record), "key": key, "rtmp_app": "live", "whip_path": "/whip"},
                             status=201, headers={"Location": f"/api/v1/keys/{record.key_id}"})


async def revoke_key(request: web.Request) -> web.Response:
    api: KeyApi = request.app[KEYS_KEY]
    caller = principal(request)
    key_id = request.match_info["key_id"]
    loop = asyncio.get_running_loop()
    try:
        record = await loop.run_in_executor(None, api.store.get, key_id)
        if not caller.may_access(record.owner):
            raise NotYours(f"no stream key with id {key_id!r}")
        await loop.run_in_executor(None, api.store.revoke, key_id)
    except StreamKeyError as exc:
        return _error(404, str(exc))
    await api.audit.append(caller.subject, "key.revoke", key_id, name=record.stream.name)
    return web.Response(status=204)
