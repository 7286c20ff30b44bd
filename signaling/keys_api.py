"""Stream keys over the API: each user makes, lists and revokes their own; admins see all.

    GET    /api/v1/keys            [{key_id, name, face_id, owner, created, revoked, active, push, record, play_token}]
    POST   /api/v1/keys            {name, face_id, options?, push?: [rtmp://...], record?: path} -> 201 {..., key}
                                   (options.faces_map names people by reference photo: {face id: face id | "keep"})
                                   (a user's push destinations must pass the push policy: 400 saying why;
                                   400 past quotas.push_per_key destinations; 409 past quotas.keys_per_user
                                   keys, their oldest revoked ones make room)
    DELETE /api/v1/keys/{key_id}   -> 204 (revoked: its live publish, pushes and play token end within a
                                   second, on whichever node it is live; its next publish is refused)

The secret key is in the 201 answer only (the store keeps its SHA-256). Checking the face
(that it exists and the caller may wear it) and the options is the node's business (it
knows faces and the swap schema): it passes ``check_face`` and ``normalise_options``, so
this module never touches models. What is stored is what was checked: the name trimmed,
the options as the schema reads them, each destination once."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from signaling.auth import AuditLog, Principal
from signaling.auth.middleware import NotYours, principal
from signaling.http_input import BadInput, display_name, read_json_object
from signaling.push_policy import PushPolicy
from signaling.stream_keys import StreamKey, StreamKeyError, StreamKeyLimitError, StreamKeyStore, check_destination

KEYS_KEY = web.AppKey("stream_key_api", object)
_PERSON_ID = re.compile(r"person-\d+")
MAX_NAME = 80
MAX_URL_CHARS = 2048
FIELDS = frozenset({"name", "face_id", "options", "push", "record"})


@dataclass(frozen=True)
class KeyQuotas:
    """The config's ``quotas.keys_per_user`` and ``quotas.push_per_key``."""

    keys_per_user: int = 64
    push_per_key: int = 16


class KeyApi:
    def __init__(self, store: StreamKeyStore, check_face: Callable[[str, Principal], Awaitable[None]],
                 normalise_options: Callable[[dict[str, Any]], dict[str, Any]], audit: AuditLog,
                 push_policy: PushPolicy | None = None, quotas: KeyQuotas = KeyQuotas(),
                 on_revoke: Callable[[], Awaitable[None]] | None = None) -> None:
        self.store = store
        self.quotas = quotas
        self.check_face = check_face
        self.normalise_options = normalise_options
        self.audit = audit
        self.push_policy = push_policy or PushPolicy()  # users' destinations: public addresses only
        self.on_revoke = on_revoke  # ends this node's live publishes of keys revoked now


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
    records = await api.store.call(api.store.list, None if caller.is_admin else caller.subject)
    return web.json_response([key_json(r) for r in records])


async def create_key(request: web.Request) -> web.Response:
    api: KeyApi = request.app[KEYS_KEY]
    caller = principal(request)
    try:
        body = await read_json_object(request, '{"name", "face_id", "options", "push", "record"}')
        unknown = sorted(set(body) - FIELDS)
        if unknown:
            raise BadInput(f"unknown field(s) {', '.join(unknown)}")
        name = display_name(body.get("name"), "name", MAX_NAME)
        face_id, record_to = body.get("face_id"), body.get("record")
        if not isinstance(face_id, str) or not face_id:
            raise BadInput("face_id is required (see GET /api/v1/faces)")
        push = _destinations(body.get("push"), api.quotas.push_per_key)
    except BadInput as exc:
        return _error(400, exc.reason)
    if record_to is not None and (not isinstance(record_to, str) or not caller.is_admin):
        return _error(403 if isinstance(record_to, str) else 400,
                      "record names a path on the server: admins only" if isinstance(record_to, str)
                      else "record must be a path")
    await api.check_face(face_id, caller)  # another user's face: 404, as for a missing one
    options = api.normalise_options(body.get("options") or {})
    faces_map = options.get("faces_map") or {}
    if any(_PERSON_ID.fullmatch(person) for person in faces_map):
        return _error(400, "a stream key's faces_map names people by a reference photo's face id: a session's "
                           "person ids (person-2) do not outlive the session")
    for mapped in {*faces_map.keys(), *faces_map.values()} - {"keep"}:
        await api.check_face(mapped, caller)
    try:
        for url in push if not caller.is_admin else ():
            await api.push_policy.check_new(url)
        key, record = await api.store.call(
            api.store.add, name, face_id=face_id, swap=options, push=push, record=record_to, owner=caller.subject,
            push_unrestricted=caller.is_admin, max_per_owner=api.quotas.keys_per_user)
    except StreamKeyLimitError as exc:
        return _error(409, str(exc))
    except StreamKeyError as exc:
        return _error(400, str(exc))
    await api.audit.append(caller.subject, "key.create", record.key_id, name=record.stream.name, face_id=face_id)
    return web.json_response({**key_json(record), "key": key, "rtmp_app": "live", "whip_path": "/whip"},
                             status=201, headers={"Location": f"/api/v1/keys/{record.key_id}"})


def _destinations(value: object, most: int) -> tuple[str, ...]:
    """The push URLs of a new key, each once and trimmed, at most ``most`` of them: every
    destination is a connection the node keeps up for the stream (and retries), so their
    number is the user's to ask for only within the quota."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(url, str) for url in value):
        raise BadInput("push must be a list of rtmp:// URLs")
    urls = tuple(dict.fromkeys(url.strip() for url in value))
    if len(urls) > most:
        raise BadInput(f"push names {len(urls)} destinations; a stream key pushes to at most {most} "
                       "(quotas.push_per_key)")
    for url in urls:
        if len(url) > MAX_URL_CHARS:
            raise BadInput(f"a push destination is {len(url)} characters long; the limit is {MAX_URL_CHARS}")
        try:
            check_destination(url)
        except StreamKeyError as exc:
            raise BadInput(str(exc)) from None
    return urls


async def revoke_key(request: web.Request) -> web.Response:
    api: KeyApi = request.app[KEYS_KEY]
    caller = principal(request)
    key_id = request.match_info["key_id"]
    try:
        record = await api.store.call(api.store.get, key_id)
        if not caller.may_access(record.owner):
            raise NotYours(f"no stream key with id {key_id!r}")
        await api.store.call(api.store.revoke, key_id)
    except StreamKeyError as exc:
        return _error(404, str(exc))
    if api.on_revoke is not None:
        await api.on_revoke()  # here at once; other nodes within their watch's poll
    await api.audit.append(caller.subject, "key.revoke", key_id, name=record.stream.name)
    return web.Response(status=204)
