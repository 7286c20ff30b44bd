"""HTTP API of live sessions: the face library, browser sessions, WHIP ingest, WHEP playback.

Every error under these paths is JSON ``{"error": reason}`` with a 4xx status (5xx only for
a full server, an unreachable registry, or a bug), and a bad request never touches another
session. Behind a gateway, requests that create or resume a session carry the id the gateway
placed in ``X-Swapcast-Session-Id``.

    GET    /api/v1/faces                          [{id, name, owner, thumbnail_url}] (samples first; signed URLs)
    POST   /api/v1/faces                          raw image body, or multipart fields "image" (photos of one person) -> 201
    POST   /api/v1/faces/{id}/photos              the same: more photos of the face's person -> 200 the face (uploads only)
    PATCH  /api/v1/faces/{id}                     {name} -> 200 the face (uploads only)
    DELETE /api/v1/faces/{id}                     -> 204 (uploads only)
    GET    /api/v1/faces/{id}/thumbnail.jpg       Bearer token, or the signed ?expires=&sig= of the listing
    POST   /api/v1/sessions                       {face_id, options} -> 201 {session_id, state: "placed", offer_url, ice_servers}
                                                  {face_id, options, sdp, type: "offer"} -> 201 {session_id, sdp, type}
    POST   /api/v1/sessions/{id}/offer            {sdp, type: "offer"} -> 201 {session_id, sdp, type} (also a re-offer)
    POST   /api/v1/sessions/{id}/candidates       {candidate, sdpMid, sdpMLineIndex} -> 204 (trickle ICE; "" ends)
    GET    /api/v1/sessions/{id}/preview.jpg      the newest swapped frame, small (any protocol)
    GET    /api/v1/sessions                       [{id, protocol, created, face_id, options, state, node_id, stats, people, ...}]
    GET    /api/v1/sessions/{id}                  ... people: [{id, on_screen, since, frames, wears, thumbnail_url}]
    GET    /api/v1/sessions/{id}/people/{person}/thumbnail.jpg   Bearer token, or the signed link of the listing
    PATCH  /api/v1/sessions/{id}                  any of {enabled, face_id, options} -> 200 new state
                                                  (options.faces_map: {person-2 | reference face id: face id | "keep"})
    DELETE /api/v1/sessions/{id}                  -> 204
    POST   /whip                                  application/sdp + Bearer stream key -> 201, Location /whip/{id},
                                                  Link: <stun:/turn:...>; rel="ice-server" (RFC 9725; WHEP too)
    DELETE /whip/{id}                             Bearer: the same stream key, or the owner's token -> 204
    POST   /whep/{session id}                     application/sdp (recvonly) -> 201, Location /whep/{id}/{viewer}
    DELETE /whep/{session id}/{viewer id}         -> 204
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from gpu.errors import SwapcastError
from signaling.log_safety import quoted
from streamer.faces import (
    MAX_UPLOAD_BYTES,
    FaceThumbnail,
    FaceEntry,
    FaceLibrary,
    FaceListing,
    ImageTooLargeError,
    NotAnImageError,
    TooManyPhotosError,
    UnknownFaceError,
    file_face_name,
)
from signaling.auth import AuditLog, AuthError, Principal, TokenVerifier, require_visible
from signaling.auth.middleware import PRINCIPAL_KEY, check_owner, principal
from signaling.auth.signed_urls import UrlSigner
from signaling.http_input import BadInput, read_json, read_json_object
from signaling.registry import NoCapacityError, RegistryUnavailable, UnknownSessionError
from signaling.turn_credentials import ice_server_links
from streamer.webrtc.errors import (
    BadRequestError,
    NotFoundError,
    PayloadTooLargeError,
    UnauthorizedError,
    UnsupportedMediaTypeError,
)
from streamer.pipeline.people_map import is_face_id
from streamer.webrtc.manager import SessionManager
from streamer.webrtc.offers import MAX_SDP_BYTES

log = logging.getLogger(__name__)

SESSIONS_KEY = web.AppKey("webrtc_sessions", SessionManager)
FACES_KEY = web.AppKey("face_library", FaceLibrary)
ALL_SESSIONS_KEY = web.AppKey("all_sessions", object)
AUDIT_KEY = web.AppKey("audit_log", AuditLog)
VERIFIER_KEY = web.AppKey("token_verifier", TokenVerifier)
SIGNER_KEY = web.AppKey("url_signer", UrlSigner)
# user -> the ICE servers a placed session's browser should use (STUN, time-limited TURN)
ICE_SERVERS_KEY = web.AppKey("browser_ice_servers", Callable[[str], list[dict]])
API_PREFIXES = ("/api/v1/", "/whip", "/whep")
SDP = "application/sdp"
SESSION_ID_HEADER = "X-Swapcast-Session-Id"

# face library errors -> HTTP status
_FACE_STATUS = {NotAnImageError: 415, ImageTooLargeError: 413, UnknownFaceError: 404}


def error(status: int, reason: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers)


def status_of(exc: SwapcastError) -> int:
    status = getattr(exc, "status", None)  # session, auth and ownership errors carry theirs
    if isinstance(status, int) and 400 <= status < 600:
        return status
    if isinstance(exc, (RegistryUnavailable, NoCapacityError)):
        return 503
    if isinstance(exc, UnknownSessionError):
        return 404
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
    except AuthError:
        raise  # the auth middleware renders these (WWW-Authenticate, Retry-After)
    except SwapcastError as exc:
        headers = {"WWW-Authenticate": 'Bearer realm="whip"'} if isinstance(exc, UnauthorizedError) else None
        return error(status_of(exc), str(exc), headers)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error(exc.status, exc.reason or "error", {k: v for k, v in exc.headers.items() if k == "Allow"})
    except ConnectionResetError:
        raise  # the client hung up mid-request: nobody to answer, and no fault of ours (aiohttp notes it)
    except Exception:
        log.exception("%s %s failed", request.method, quoted(request.path))
        return error(500, "internal error (see the server log)")


def add_routes(app: web.Application, sessions: SessionManager, faces: FaceLibrary, audit: AuditLog,
               all_sessions: Callable[[], Awaitable[list[dict]]] | None = None,
               verifier: TokenVerifier | None = None, signer: UrlSigner | None = None) -> None:
    """``all_sessions`` lists the node's sessions of every protocol (RTMP too) for
    ``GET /api/v1/sessions``; by default only this manager's. Every route but WHIP (which
    takes a stream key) runs behind the auth middleware: a user sees and touches only
    their own sessions and faces, an admin all of them. ``verifier`` lets an owner's
    token end a WHIP session too (without it, only the publishing stream key can).
    ``signer`` signs the thumbnail links of face listings (``<img>`` tags send no token);
    without it the links are plain and need the token."""
    app[SESSIONS_KEY] = sessions
    if signer is not None:
        app[SIGNER_KEY] = signer
    if verifier is not None:
        app[VERIFIER_KEY] = verifier
    app[FACES_KEY] = faces
    app[AUDIT_KEY] = audit
    app[ALL_SESSIONS_KEY] = all_sessions or sessions.snapshot
    app.middlewares.append(json_errors)
    r = app.router
    r.add_get("/api/v1/faces", list_faces)
    r.add_post("/api/v1/faces", upload_face)
    r.add_patch("/api/v1/faces/{face_id}", rename_face)
    r.add_delete("/api/v1/faces/{face_id}", delete_face)
    r.add_post("/api/v1/faces/{face_id}/photos", add_face_photos)
    r.add_get("/api/v1/faces/{face_id}/thumbnail.jpg", face_thumbnail)
    r.add_get("/api/v1/processors", list_processors)
    r.add_get("/api/v1/sessions", list_sessions)
    r.add_post("/api/v1/sessions", create_session)
    r.add_post("/api/v1/sessions/{session_id}/offer", offer_session)
    r.add_post("/api/v1/sessions/{session_id}/candidates", add_candidate)
    r.add_get("/api/v1/sessions/{session_id}/preview.jpg", session_preview)
    r.add_get("/api/v1/sessions/{session_id}/people/{person_id}/thumbnail.jpg", person_thumbnail)
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


def thumbnail_path(face_id: str) -> str:
    return f"/api/v1/faces/{face_id}/thumbnail.jpg"


def is_signed_thumbnail(request: web.Request) -> bool:
    """A thumbnail request (a face's, a session's person's) that carries its own signature
    instead of a token (``<img>``)."""
    return (request.method in ("GET", "HEAD") and request.path.startswith(("/api/v1/faces/", "/api/v1/sessions/"))
            and request.path.endswith("/thumbnail.jpg") and "sig" in request.query)


def face_json(request: web.Request, entry: FaceEntry | FaceListing) -> dict[str, str | int]:
    """A face as the API shows it; its ``thumbnail_url`` is signed for the face's owner
    when the app has a signer, so an ``<img>`` loads it for minutes without the token."""
    signer = request.app.get(SIGNER_KEY)
    path = thumbnail_path(entry.id)
    return {"id": entry.id, "name": entry.name, "owner": entry.owner, "photos": entry.photo_count,
            "thumbnail_url": signer.sign(path, entry.owner) if signer is not None else path}


def _shared(owner: str) -> bool:
    """Faces without an owner (the samples, faces of command-line stream keys) are everyone's."""
    return not owner


async def _check_face(request: web.Request, face_id: object) -> None:
    """404 for a face that does not exist or is another user's (the same answer)."""
    if not isinstance(face_id, str) or not face_id:
        return  # the manager says what is wrong with it
    entry = await request.app[FACES_KEY].get(face_id)
    require_visible(principal(request), entry.owner, f"no face with id {face_id!r}", shared_when_unowned=True)


async def _check_mapped_faces(request: web.Request, options: object) -> None:
    """Every face a ``faces_map`` names (reference photos and the faces worn) must be one
    the caller may use: 404 otherwise, as for ``face_id`` (names that are no face id at
    all are the schema's 400)."""
    mapping = options.get("faces_map") if isinstance(options, dict) else None
    if not isinstance(mapping, dict):
        return  # the schema says what is wrong with it
    names = {name for name in (*mapping.keys(), *mapping.values()) if isinstance(name, str)}
    for name in sorted(names):
        if is_face_id(name):
            await _check_face(request, name)


async def _check_session(request: web.Request, session_id: str, *, anywhere: bool = False) -> None:
    check_owner(request, await request.app[SESSIONS_KEY].owner_of(session_id, anywhere=anywhere), "session")


async def list_faces(request: web.Request) -> web.Response:
    caller = principal(request)
    faces = await request.app[FACES_KEY].list()
    return web.json_response([face_json(request, entry) for entry in faces
                              if _shared(entry.owner) or caller.may_access(entry.owner)])


async def list_processors(request: web.Request) -> web.Response:
    """The FaceFusion processors this node loaded from its models folder (gpu/processors)."""
    return web.json_response(request.app[FACES_KEY].engine.processors.describe())


async def upload_face(request: web.Request) -> web.Response:
    caller = principal(request)
    photos, name = await _read_upload(request)
    entry = await request.app[FACES_KEY].add([data for data, _ in photos], name=name, owner=caller.subject,
                                             filenames=[filename for _, filename in photos])
    await request.app[AUDIT_KEY].append(caller.subject, "face.upload", entry.id, name=entry.name,
                                        bytes=sum(len(data) for data, _ in photos), photos=len(photos))
    return web.json_response(face_json(request, entry), status=201, headers={"Location": thumbnail_path(entry.id)})


async def add_face_photos(request: web.Request) -> web.Response:
    """More photos of an upload's person: the face is made again from all of them."""
    face_id = await _own_upload(request)
    photos, _ = await _read_upload(request)
    caller = principal(request)
    entry = await request.app[FACES_KEY].add_photos(face_id, [data for data, _ in photos], owner=caller.subject,
                                                    filenames=[filename for _, filename in photos])
    await request.app[AUDIT_KEY].append(caller.subject, "face.photos", face_id,
                                        bytes=sum(len(data) for data, _ in photos), photos=len(photos))
    return web.json_response(face_json(request, entry))


async def _own_upload(request: web.Request) -> str:
    """The id of an upload the caller may change: a sample is a 403, another user's face
    a 404 exactly like a missing one."""
    face_id = request.match_info["face_id"]
    owner = await request.app[FACES_KEY].owner_of(face_id)
    require_visible(principal(request), owner, f"no face with id {face_id!r}")
    return face_id


async def rename_face(request: web.Request) -> web.Response:
    face_id = await _own_upload(request)
    body = await read_json_object(request, 'like {"name": "..."}')
    if set(body) != {"name"}:
        unknown = sorted(set(body) - {"name"})
        raise BadInput(f"unknown field(s): {', '.join(unknown)}; only name can change" if unknown
                       else 'name is required, like {"name": "..."}')
    listing = await request.app[FACES_KEY].rename(face_id, body["name"])
    await request.app[AUDIT_KEY].append(principal(request).subject, "face.rename", face_id, name=listing.name)
    return web.json_response(face_json(request, listing))


async def delete_face(request: web.Request) -> web.Response:
    face_id = await _own_upload(request)
    await request.app[FACES_KEY].delete(face_id)
    await request.app[AUDIT_KEY].append(principal(request).subject, "face.delete", face_id)
    return web.Response(status=204)


async def face_thumbnail(request: web.Request) -> web.Response:
    """With a token: the caller's own faces and the samples. With a signed link (no
    token): the face it was signed for, until it expires. Anything else: 404."""
    face_id = request.match_info["face_id"]
    missing = f"no face with id {face_id!r}"
    signer = request.app.get(SIGNER_KEY)
    signed = PRINCIPAL_KEY not in request and signer is not None and is_signed_thumbnail(request)
    if signed:
        signer.check_expiry(request.query.get("expires"))  # before the lookup: says nothing about the face
    thumbnail: FaceThumbnail = await request.app[FACES_KEY].thumbnail(face_id)
    if signed:
        signer.check(request.path, thumbnail.owner, request.query.get("expires"), request.query.get("sig"), missing)
        cache = f"private, max-age={signer.remaining_s(request.query['expires'])}"
    else:
        require_visible(principal(request), thumbnail.owner, missing, shared_when_unowned=True)
        cache = "private, max-age=600"
    return web.Response(body=thumbnail.jpeg, content_type="image/jpeg", headers={"Cache-Control": cache})


async def _read_upload(request: web.Request) -> tuple[list[tuple[bytes, str | None]], str | None]:
    """The photos (a raw body, or each multipart field ``image``) with their file names, each
    never more than the limit in memory and no more of them than a face is made of, and a
    name from ``?name=`` or the first uploaded file's name."""
    name = request.query.get("name") or None
    if not request.content_type.startswith("multipart/"):
        return [(await _read_limited(request.content.read), None)], name
    most = request.app[FACES_KEY].max_photos_per_face
    photos: list[tuple[bytes, str | None]] = []
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if getattr(part, "name", None) != "image":
                await part.release()
                continue
            if len(photos) == most:  # refused before it is read
                raise TooManyPhotosError(f"more than {most} photos in one upload; a face is made of at most {most}", 413)
            filename = _text(getattr(part, "filename", None), "file name")
            try:
                photos.append((await _read_limited(part.read_chunk), filename))
            except ImageTooLargeError as exc:
                raise ImageTooLargeError(f"photo {len(photos) + 1}{f' ({filename})' if filename else ''}: {exc}") from None
    except (ValueError, AssertionError, HttpProcessingError) as exc:  # aiohttp's multipart parser on bad input
        raise BadRequestError(f"malformed multipart body: {exc}") from None
    if not photos:
        raise BadRequestError('the multipart upload needs a field named "image" (one per photo)')
    return photos, name or file_face_name(photos[0][1])


def _text(value: str | None, what: str) -> str | None:
    """``value`` if it is text that can be stored (aiohttp keeps undecodable bytes of a
    header, such as a multipart file name, as lone surrogates)."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequestError(f"the {what} is not UTF-8 text") from None
    return value


async def _read_limited(read_chunk) -> bytes:
    chunks, total = [], 0
    while chunk := await read_chunk(64 * 1024):
        total += len(chunk)
        if total > MAX_UPLOAD_BYTES:
            raise ImageTooLargeError(f"the image is over the {MAX_UPLOAD_BYTES // (1024 * 1024)} MB limit")
        chunks.append(chunk)
    return b"".join(chunks)


# -- browser sessions -------------------------------------------------------------------------------


def _placed_id(request: web.Request) -> str | None:
    """The session id the gateway placed on this node, if it forwarded the request."""
    value = request.headers.get(SESSION_ID_HEADER, "").strip()
    if value and (len(value) > 64 or not value.isascii() or not value.replace("-", "").replace("_", "").isalnum()):
        raise BadRequestError(f"malformed {SESSION_ID_HEADER}")
    return value or None


async def create_session(request: web.Request) -> web.Response:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise BadRequestError('expected a JSON object {"face_id", "options"} (and "sdp", "type": "offer" to connect at once)')
    manager = request.app[SESSIONS_KEY]
    owner = principal(request).subject
    await _check_face(request, body.get("face_id"))
    await _check_mapped_faces(request, body.get("options"))
    if "sdp" not in body and "type" not in body:
        record = await manager.place(body.get("face_id"), body.get("options"), session_id=_placed_id(request), owner=owner)
        ice_servers = request.app[ICE_SERVERS_KEY](owner) if ICE_SERVERS_KEY in request.app else []
        return web.json_response(
            {"session_id": record.id, "state": record.state, "node_id": record.node_id,
             "offer_url": f"/api/v1/sessions/{record.id}/offer", "ice_servers": ice_servers},
            status=201, headers={"Location": f"/api/v1/sessions/{record.id}"},
        )
    if body.get("type") != "offer":
        raise BadRequestError('"type" must be "offer"')
    session, answer = await manager.create_webrtc(
        body.get("sdp"), body.get("face_id"), body.get("options"), session_id=_placed_id(request), owner=owner
    )
    return web.json_response({"session_id": session.id, "sdp": answer, "type": "answer"}, status=201,
                             headers={"Location": f"/api/v1/sessions/{session.id}"})


async def offer_session(request: web.Request) -> web.Response:
    await _check_session(request, request.match_info["session_id"], anywhere=True)
    body = await read_json(request)
    if not isinstance(body, dict) or body.get("type") != "offer":
        raise BadRequestError('expected a JSON object {"sdp", "type": "offer"}')
    session, answer = await request.app[SESSIONS_KEY].offer(request.match_info["session_id"], body.get("sdp"))
    return web.json_response({"session_id": session.id, "sdp": answer, "type": "answer"}, status=201)


async def add_candidate(request: web.Request) -> web.Response:
    await _check_session(request, request.match_info["session_id"])
    await request.app[SESSIONS_KEY].add_candidate(request.match_info["session_id"], await read_json(request))
    return web.Response(status=204)


async def session_preview(request: web.Request) -> web.Response:
    """The newest swapped frame (any protocol, RTMP included): the dashboard's preview of
    sessions WHEP cannot show."""
    await _check_session(request, request.match_info["session_id"])
    jpeg = await request.app[SESSIONS_KEY].preview_jpeg(request.match_info["session_id"])
    return web.Response(body=jpeg, content_type="image/jpeg", headers={"Cache-Control": "no-store"})


async def person_thumbnail(request: web.Request) -> web.Response:
    """A person a live session has seen: with the owner's token, or the signed link of the
    session's listing (``<img>``); anything else is answered as a missing person."""
    session_id, person_id = request.match_info["session_id"], request.match_info["person_id"]
    missing = f"no person {person_id!r} in session {session_id!r}"
    signer = request.app.get(SIGNER_KEY)
    signed = PRINCIPAL_KEY not in request and signer is not None and is_signed_thumbnail(request)
    if signed:
        signer.check_expiry(request.query.get("expires"))
    found = await asyncio.get_running_loop().run_in_executor(
        None, request.app[SESSIONS_KEY].person_thumbnail, session_id, person_id)
    if found is None:
        raise NotFoundError(missing)
    jpeg, owner = found
    if signed:
        signer.check(request.path, owner, request.query.get("expires"), request.query.get("sig"), missing)
    else:
        require_visible(principal(request), owner, missing)
    return web.Response(body=jpeg, content_type="image/jpeg", headers={"Cache-Control": "private, max-age=5"})


def sign_people(app: web.Application, session: dict) -> dict:
    """The session with a ``thumbnail_url`` per person: signed for its owner when the app
    signs links (``<img>`` sends no token), else the plain path."""
    people = session.get("people")
    if not people:
        return session
    signer = app.get(SIGNER_KEY)
    owner = session.get("owner", "")
    signed = [{**person, "thumbnail_url": (signer.sign(person["thumbnail"], owner) if signer is not None
                                           else person["thumbnail"]) if person.get("thumbnail") else None}
              for person in people]
    return {**session, "people": signed}


async def list_sessions(request: web.Request) -> web.Response:
    caller = principal(request)
    return web.json_response([sign_people(request.app, s) for s in await request.app[ALL_SESSIONS_KEY]()
                              if caller.may_access(s.get("owner", ""))])


async def get_session(request: web.Request) -> web.Response:
    await _check_session(request, request.match_info["session_id"])
    body = sign_people(request.app, await request.app[SESSIONS_KEY].describe(request.match_info["session_id"]))
    if body.get("protocol") in ("webrtc", "whip") and ICE_SERVERS_KEY in request.app:
        # fresh TURN credentials for a re-offer after the first ones expired, or a WHEP viewer
        # (the dashboard's preview) that must gather relay candidates before its offer
        body["ice_servers"] = request.app[ICE_SERVERS_KEY](principal(request).subject)
    return web.json_response(body)


async def patch_session(request: web.Request) -> web.Response:
    manager = request.app[SESSIONS_KEY]
    await _check_session(request, request.match_info["session_id"])  # 404 before looking at the body
    body = await read_json(request)
    if isinstance(body, dict):
        await _check_face(request, body.get("face_id"))
        await _check_mapped_faces(request, body.get("options"))
    return web.json_response(sign_people(request.app, await manager.update(request.match_info["session_id"], body)))


async def delete_session(request: web.Request) -> web.Response:
    session_id = request.match_info["session_id"]
    owner = await request.app[SESSIONS_KEY].owner_of(session_id)
    caller = check_owner(request, owner, "session")
    await request.app[SESSIONS_KEY].close(session_id)
    if owner != caller.subject:  # an operator ending someone's session
        await request.app[AUDIT_KEY].append(caller.subject, "session.kill", session_id, owner=owner)
    return web.Response(status=204)


# -- WHIP / WHEP ------------------------------------------------------------------------------------


async def _sdp_body(request: web.Request) -> str:
    """The SDP offer, at most ``MAX_SDP_BYTES`` read (413 past it, before it is all read)."""
    if request.content_type != SDP:
        raise UnsupportedMediaTypeError(f"Content-Type must be {SDP}, not {request.content_type or 'missing'}")
    too_big = PayloadTooLargeError(f"the offer SDP is over {MAX_SDP_BYTES // 1024} KiB")
    if request.content_length is not None and request.content_length > MAX_SDP_BYTES:
        raise too_big
    body = await request.content.read(MAX_SDP_BYTES + 1)
    while len(body) <= MAX_SDP_BYTES and (more := await request.content.read(MAX_SDP_BYTES + 1 - len(body))):
        body += more
    if len(body) > MAX_SDP_BYTES:
        raise too_big
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequestError("malformed SDP: not UTF-8 text") from None


def _bearer(request: web.Request) -> str:
    """The bearer credential: ASCII by definition (RFC 6750's b64token; stream keys and JWTs
    are), so no other byte reaches a key lookup or a token parser."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if not header:
        raise UnauthorizedError("missing Authorization: Bearer <stream key>")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthorizedError("Authorization must be 'Bearer <stream key>'")
    if not token.isascii() or not token.strip().isprintable():
        raise UnauthorizedError("malformed bearer credential: it must be printable ASCII")
    return token.strip()


def _token_caller(request: web.Request, credential: str) -> Principal | None:
    """Who ``credential`` names when it is a valid API token (None when it is not one)."""
    verifier = request.app.get(VERIFIER_KEY)
    if verifier is None:
        return None
    try:
        return verifier.verify(credential)
    except AuthError:
        return None


def _answer_headers(request: web.Request, location: str, user: str) -> list[tuple[str, str]]:
    """``Location`` and, when STUN/TURN is configured, one RFC 9725 ``Link: <url>;
    rel="ice-server"`` per server URL, TURN with the same time-limited credentials a browser
    session gets. Only on the authenticated 201, not on an (anonymous) OPTIONS, so nobody
    mints relay credentials without a stream key or token."""
    servers = request.app[ICE_SERVERS_KEY](user) if ICE_SERVERS_KEY in request.app else []
    return [("Location", location), *(("Link", link) for link in ice_server_links(servers))]


async def whip_publish(request: web.Request) -> web.Response:
    """The stream key is checked before the body is read: an anonymous publisher with a
    bogus key costs one indexed lookup, never a slowly sent SDP body."""
    manager = request.app[SESSIONS_KEY]
    record = await manager.check_stream_key(_bearer(request))
    offer = await _sdp_body(request)
    session, answer = await manager.create_whip(offer, record, session_id=_placed_id(request))
    return web.Response(status=201, text=answer, content_type=SDP,
                        headers=_answer_headers(request, f"/whip/{session.id}", session.record.owner))


async def whip_delete(request: web.Request) -> web.Response:
    """Ends a WHIP session for its publisher (the stream key that made it, which WHIP clients
    send again on DELETE) or its owner's (or an admin's) token; anyone else gets the answer
    an unknown id gets, so the resource URL alone is not enough and ids cannot be probed."""
    credential = _bearer(request)
    session_id = request.match_info["session_id"]
    manager = request.app[SESSIONS_KEY]
    session = manager.get(session_id, protocol="whip")
    caller = None
    if not manager.is_publisher(session, credential):
        caller = _token_caller(request, credential)
        if caller is None or not caller.may_access(session.record.owner):
            raise NotFoundError(f"no WHIP session with id {session_id!r}")
    await manager.close(session_id)
    if caller is not None and caller.subject != session.record.owner:  # an operator ending someone's stream
        await request.app[AUDIT_KEY].append(caller.subject, "session.kill", session_id, owner=session.record.owner)
    return web.Response(status=204)


async def whep_view(request: web.Request) -> web.Response:
    manager = request.app[SESSIONS_KEY]
    session_id = request.match_info["session_id"]
    await _check_session(request, session_id)  # 404 before reading the body
    viewer, answer = await manager.add_viewer(session_id, await _sdp_body(request))
    return web.Response(status=201, text=answer, content_type=SDP,
                        headers=_answer_headers(request, f"/whep/{session_id}/{viewer.id}", principal(request).subject))


async def whep_delete(request: web.Request) -> web.Response:
    await _check_session(request, request.match_info["session_id"])
    await request.app[SESSIONS_KEY].remove_viewer(request.match_info["session_id"], request.match_info["viewer_id"])
    return web.Response(status=204)


async def no_trickle(request: web.Request) -> web.Response:
    return error(405, "trickle ICE and ICE restarts are not supported: send every candidate in the offer",
                 {"Allow": "DELETE"})
