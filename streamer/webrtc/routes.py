"""HTTP API of live sessions: the face library, browser sessions, WHIP ingest, WHEP playback.

Every error under these paths is JSON ``{"error": reason}`` with a 4xx status (5xx only for
a full server or a bug), and a bad request never touches another session.

    GET    /api/v1/faces                          [{id, name, thumbnail_url}] (samples first)
    POST   /api/v1/faces                          raw image body or multipart field "image" -> 201
    GET    /api/v1/faces/{id}/thumbnail.jpg
    POST   /api/v1/sessions                       {sdp, type: "offer", face_id, options} -> 201 {session_id, sdp, type}
    GET    /api/v1/sessions                       [{id, protocol, created, face_id, options, stats, ...}]
    GET    /api/v1/sessions/{id}
    PATCH  /api/v1/sessions/{id}                  any of {enabled, face_id, options} -> 200 new state
    DELETE /api/v1/sessions/{id}                  -> 204
    POST   /whip                                  application/sdp + Bearer stream key -> 201, Location /whip/{id}
    DELETE /whip/{id}                             -> 204
    POST   /whep/{session id}                     application/sdp (recvonly) -> 201, Location /whep/{id}/{viewer}
    DELETE /whep/{session id}/{viewer id}         -> 204
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from aiohttp import web

from gpu.errors import SwapcastError
from streamer.faces import (
    MAX_UPLOAD_BYTES,
    FaceEntry,
    FaceLibrary,
    ImageTooLargeError,
    NotAnImageError,
    UnknownFaceError,
)
from streamer.webrtc.errors import (
    BadRequestError,
    SessionError,
    UnauthorizedError,
    UnsupportedMediaTypeError,
)
from streamer.webrtc.manager import SessionManager

log = logging.getLogger(__name__)

SESSIONS_KEY = web.AppKey("webrtc_sessions", SessionManager)
FACES_KEY = web.AppKey("face_library", FaceLibrary)
ALL_SESSIONS_KEY = web.AppKey("all_sessions", object)
API_PREFIXES = ("/api/v1/faces", "/api/v1/sessions", "/whip", "/whep")
SDP = "application/sdp"

# face library errors -> HTTP status
_FACE_STATUS = {NotAnImageError: 415, ImageTooLargeError: 413, UnknownFaceError: 404}


def error(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers)


def status_of(exc: SwapcastError) -> int:
    if isinstance(exc, SessionError):
        return exc.status
    for kind, status in _FACE_STATUS.items():
        if isinstance(exc, kind):
            return status
    return 422  # no face, several faces, any other unusable input


@web.middleware
async def json_errors(request: web.Request, handler):
    """Under the API paths, every error is JSON; elsewhere nothing changes."""
    if not request.path.startswith(API_PREFIXES):
        return await handler(request)
    try:
        return await handler(request)
    except SwapcastError as exc:
        headers = {"WWW-Authenticate": 'Bearer realm="whip"'} if isinstance(exc, UnauthorizedError) else None
        return error(status_of(exc), str(exc), headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error(exc.status, exc.reason or "error", {k: v for k, v in exc.headers.items() if k == "Allow"})
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return error(500, "internal error (see the server log)")


def add_routes(app: web.Application, sessions: SessionManager, faces: FaceLibrary,
               all_sessions: Callable[[], list[dict]] | None = None) -> None:
    """``all_sessions`` lists the node's sessions of every protocol (RTMP too) for
    ``GET /api/v1/sessions``; by default only this manager's."""
    app[SESSIONS_KEY] = sessions
    app[FACES_KEY] = faces
    app[ALL_SESSIONS_KEY] = all_sessions or sessions.snapshot
    app.middlewares.append(json_errors)
    r = app.router
    r.add_get("/api/v1/faces", list_faces)
    r.add_post("/api/v1/faces", upload_face)
    r.add_get("/api/v1/faces/{face_id}/thumbnail.jpg", face_thumbnail)
    r.add_get("/api/v1/sessions", list_sessions)
    r.add_post("/api/v1/sessions", create_session)
    r.add_get("/api/v1/sessions/{session_id}", get_session)
    r.add_patch("/api/v1/sessions/{session_id}", patch_session)
    r.add_delete("/api/v1/sessions/{session_id}", delete_session)
    r.add_post("/whip", whip_publish)
    r.add_delete("/whip/{session_id}", whip_delete)
    r.add_patch("/whip/{session_id}", no_trickle)
    r.add_post("/whep/{session_id}", whep_view)
    r.add_delete("/whep/{session_id}/{viewer_id}", whep_delete)
    r.add_patch("/whep/{session_id}/{viewer_id}", no_trickle)


# -- faces ----------------------------------------------------------------------------------------


def face_json(entry: FaceEntry) -> dict[str, str]:
    return {"id": entry.id, "name": entry.name, "thumbnail_url": f"/api/v1/faces/{entry.id}/thumbnail.jpg"}


async def list_faces(request: web.Request) -> web.Response:
    return web.json_response([face_json(entry) for entry in await request.app[FACES_KEY].list()])


async def upload_face(request: web.Request) -> web.Response:
    data, name = await _read_upload(request)
    entry = await request.app[FACES_KEY].add(data, name=name)
    return web.json_response(face_json(entry), status=201, headers={"Location": face_json(entry)["thumbnail_url"]})


async def face_thumbnail(request: web.Request) -> web.Response:
    entry = await request.app[FACES_KEY].get(request.match_info["face_id"])
    return web.Response(body=entry.thumbnail_jpeg, content_type="image/jpeg",
                        headers={"Cache-Control": "max-age=3600"})


async def _read_upload(request: web.Request) -> tuple[bytes, str | None]:
    """The image bytes (raw body, or the multipart field ``image``), never more than the
    limit in memory, and a name from ``?name=`` or the uploaded file's name."""
    name = request.query.get("name") or None
    if request.content_type.startswith("multipart/"):
        try:
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                if getattr(part, "name", None) == "image":
                    data = await _read_limited(part.read_chunk)
                    filename = getattr(part, "filename", None)
                    return data, name or (filename.rsplit(".", 1)[0] if filename else None)
                await part.release()
        except (ValueError, AssertionError) as exc:  # aiohttp's multipart parser on bad input
            raise BadRequestError(f"malformed multipart body: {exc}") from None
        raise BadRequestError('the multipart upload needs a field named "image"')
    return await _read_limited(request.content.read), name


async def _read_limited(read_chunk) -> bytes:
    chunks, total = [], 0
    while chunk := await read_chunk(64 * 1024):
        total += len(chunk)
        if total > MAX_UPLOAD_BYTES:
            raise ImageTooLargeError(f"the image is over the {MAX_UPLOAD_BYTES // (1024 * 1024)} MB limit")
        chunks.append(chunk)
    return b"".join(chunks)


# -- browser sessions -------------------------------------------------------------------------------


async def _json_body(request: web.Request) -> object:
    try:
        return await request.json(loads=json.loads)
    except (ValueError, UnicodeDecodeError):
        raise BadRequestError("the body must be JSON") from None


async def create_session(request: web.Request) -> web.Response:
    body = await _json_body(request)
    if not isinstance(body, dict):
        raise BadRequestError('expected a JSON object {"sdp", "type": "offer", "face_id", "options"}')
    if body.get("type") != "offer":
        raise BadRequestError('"type" must be "offer"')
    session, answer = await request.app[SESSIONS_KEY].create_webrtc(
        body.get("sdp"), body.get("face_id"), body.get("options")
    )
    return web.json_response({"session_id": session.id, "sdp": answer, "type": "answer"}, status=201,
                             headers={"Location": f"/api/v1/sessions/{session.id}"})


async def list_sessions(request: web.Request) -> web.Response:
    return web.json_response(request.app[ALL_SESSIONS_KEY]())


async def get_session(request: web.Request) -> web.Response:
    return web.json_response(request.app[SESSIONS_KEY].get(request.match_info["session_id"]).describe())


async def patch_session(request: web.Request) -> web.Response:
    manager = request.app[SESSIONS_KEY]
    manager.get(request.match_info["session_id"])  # 404 before looking at the body
    session = await manager.update(request.match_info["session_id"], await _json_body(request))
    return web.json_response(session.describe())


async def delete_session(request: web.Request) -> web.Response:
    await request.app[SESSIONS_KEY].close(request.match_info["session_id"])
    return web.Response(status=204)


# -- WHIP / WHEP ------------------------------------------------------------------------------------


async def _sdp_body(request: web.Request) -> str:
    if request.content_type != SDP:
        raise UnsupportedMediaTypeError(f"Content-Type must be {SDP}, not {request.content_type or 'missing'}")
    try:
        return await request.text()
    except UnicodeDecodeError:
        raise BadRequestError("malformed SDP: not UTF-8 text") from None


def _bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if not header:
        raise UnauthorizedError("missing Authorization: Bearer <stream key>")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthorizedError("Authorization must be 'Bearer <stream key>'")
    return token.strip()


async def whip_publish(request: web.Request) -> web.Response:
    key = _bearer(request)
    offer = await _sdp_body(request)
    session, answer = await request.app[SESSIONS_KEY].create_whip(offer, key)
    return web.Response(status=201, text=answer, content_type=SDP, headers={"Location": f"/whip/{session.id}"})


async def whip_delete(request: web.Request) -> web.Response:
    manager = request.app[SESSIONS_KEY]
    manager.get(request.match_info["session_id"], protocol="whip")
    await manager.close(request.match_info["session_id"])
    return web.Response(status=204)


async def whep_view(request: web.Request) -> web.Response:
    manager = request.app[SESSIONS_KEY]
    session_id = request.match_info["session_id"]
    manager.get(session_id)  # 404 before reading the body
    viewer, answer = await manager.add_viewer(session_id, await _sdp_body(request))
    return web.Response(status=201, text=answer, content_type=SDP,
                        headers={"Location": f"/whep/{session_id}/{viewer.id}"})


async def whep_delete(request: web.Request) -> web.Response:
    await request.app[SESSIONS_KEY].remove_viewer(request.match_info["session_id"], request.match_info["viewer_id"])
    return web.Response(status=204)


async def no_trickle(request: web.Request) -> web.Response:
    return error(405, "trickle ICE and ICE restarts are not supported: send every candidate in the offer",
                 {"Allow": "DELETE"})
