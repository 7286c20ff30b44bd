"""The OpenAPI 3.0.3 document of the HTTP API, served at ``GET /api/v1/openapi.json``.

Written by hand (the routes are plain aiohttp handlers, nothing to introspect), and held to
the server by ``tests/test_openapi.py``: schemathesis sends generated requests to a live
node and checks every answer against this document (status codes, content types, bodies),
so a route that changes without its entry here fails the tests.

Two variants: a node's (``gateway=False``) and the gateway's (``gateway=True``), which
differ where the gateway answers itself: it adds 502 (a node failed) to forwarded routes,
and lists sessions from the registry (``created`` as a Unix time until a node describes them).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

OPENAPI_PATH = "/api/v1/openapi.json"
JSON = "application/json"
SDP = "application/sdp"
Schema = dict[str, Any]

# ids are URL-safe tokens (sessions, faces, jobs, keys) or host-derived names (nodes)
_TOKEN = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}
_NODE_ID = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: Schema) -> Schema:
    return {**schema, "nullable": True}


def _content(schema: Schema, media_type: str = JSON) -> dict[str, Any]:
    return {media_type: {"schema": schema}}


def _path_param(name: str, schema: Schema = _TOKEN, description: str = "") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema, "description": description or name}


_ERRORS = {  # status -> (component name, description)
    "400": ("BadRequest", "Malformed request (bad JSON, SDP, options or field); the reason says which"),
    "401": ("Unauthorized", "Missing, malformed, expired or forged credentials"),
    "403": ("Forbidden", "Authenticated, but not allowed (admin routes; an unknown or revoked stream key)"),
    "404": ("NotFound", "No such resource, or not the caller's (the same answer, so ids cannot be probed)"),
    "405": ("MethodNotAllowed", "Not supported on this resource"),
    "409": ("Conflict", "The resource is not in a state that allows this"),
    "413": ("PayloadTooLarge", "The upload is over the size limit"),
    "415": ("UnsupportedMediaType", "Wrong Content-Type, or the upload is not an image / video"),
    "422": ("Unprocessable", "Well-formed but unusable: no face or several faces in the photo, an unusable stream key"),
    "426": ("UpgradeRequired", "A WebSocket endpoint asked without a WebSocket upgrade"),
    "429": ("TooManyRequests", "Rate limit (per token or per client address) hit; see Retry-After"),
    "502": ("BadGateway", "The node that owns the resource failed or could not be reached"),
    "503": ("Unavailable", "Server full, shutting down, no ready node, or a backing service (Redis) is down"),
}
_HEADERS = {
    "401": {"WWW-Authenticate": {"description": "The bearer challenge (RFC 6750)", "schema": {"type": "string"}}},
    "405": {"Allow": {"description": "The methods the resource supports", "schema": {"type": "string"}}},
    "426": {"Upgrade": {"description": "websocket", "schema": {"type": "string"}}},
    "429": {"Retry-After": {"description": "Seconds until the next request is allowed", "schema": {"type": "integer"}}},
}


def _error_responses() -> dict[str, Any]:
    return {
        name: {"description": description, "content": _content(_ref("Error")),
               **({"headers": _HEADERS[status]} if status in _HEADERS else {})}
        for status, (name, description) in _ERRORS.items()
    }


class _Builder:
    """Collects operations; ``gateway`` decides the few differences between the variants."""

    def __init__(self, gateway: bool) -> None:
        self.gateway = gateway
        self.paths: dict[str, dict[str, Any]] = {}

    def op(self, method: str, path: str, operation_id: str, summary: str, tag: str,
           responses: dict[str, Any], errors: tuple[str, ...] = (), *, security: str | None = "bearerAuth",
           params: list[dict[str, Any]] | None = None, body: dict[str, Any] | None = None,
           body_required: bool = True, forwarded: bool = False, description: str = "") -> None:
        """One operation. ``errors``: its 4xx/5xx statuses; 401 and 429 are added for
        authenticated operations (the auth middleware), 429 for public ones (per-address
        limit), and 502 for operations the gateway forwards to a node."""
        statuses = set(errors) | {"429"}
        if security is not None:
            statuses.add("401")
        if forwarded and self.gateway:
            statuses.add("502")
        all_responses = {**responses, **{s: {"$ref": f"#/components/responses/{_ERRORS[s][0]}"} for s in sorted(statuses)}}
        operation: dict[str, Any] = {"operationId": operation_id, "summary": summary, "tags": [tag],
                                     "responses": all_responses}
        if description:
            operation["description"] = description
        operation["security"] = [] if security is None else [{security: []}]
        if params:
            operation["parameters"] = params
        if body is not None:
            operation["requestBody"] = {"required": body_required, "content": body}
        self.paths.setdefault(path, {})[method] = operation


def _ok(description: str, schema: Schema | None = None, media_type: str = JSON,
        headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description}
    if schema is not None:
        response["content"] = _content(schema, media_type)
    if headers:
        response["headers"] = headers
    return response


def _location(required: bool = True) -> dict[str, Any]:
    return {"Location": {"description": "The created resource", "required": required, "schema": {"type": "string"}}}


def _ice_server_links() -> dict[str, Any]:
    return {"Link": {"description": 'With STUN/TURN configured, one per server URL (RFC 9725): <url>; rel="ice-server", '
                     'TURN with username, credential (time-limited) and credential-type="password"',
                     "required": False, "schema": {"type": "string"}}}


def openapi_document(*, gateway: bool) -> dict[str, Any]:
    """The document of a node's API (``gateway=False``) or of the gateway's."""
    b = _Builder(gateway)
    _health(b)
    _faces(b)
    _sessions(b)
    _whip_whep(b)
    _keys(b)
    _nodes(b)
    _jobs(b)
    _provenance(b)
    _events(b)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "swapcast " + ("gateway" if gateway else "node"),
            "version": "1",
            "description": (
                "Real-time face swap: source faces, live sessions (WebRTC, WHIP ingest, WHEP playback, RTMP), "
                "stream keys, offline jobs and the cluster's nodes. Every error is JSON {\"error\": reason}. "
                "Authenticate with `Authorization: Bearer <JWT>` (claims sub, role admin|user, exp); users see "
                "and act on their own sessions, faces and keys, admins on all. Pages on other origins call the "
                "API, /whip and /whep from a browser when server.cors_origins lists their origin (CORS): an OPTIONS "
                "pre-flight is answered 204 without a token (403 with the reason for an origin not listed), and "
                "every answer carries Access-Control-Allow-Origin and exposes Location, Link, ETag and Retry-After; "
                "the token or stream key is still required."
            ),
        },
        "tags": [{"name": name} for name in ("health", "faces", "sessions", "whip/whep", "keys", "nodes", "jobs", "provenance", "events")],
        "security": [{"bearerAuth": []}],
        "paths": b.paths,
        "components": {"schemas": _schemas(gateway), "responses": _error_responses(), "securitySchemes": {
            "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                           "description": "HS256 or RS256 JWT; on the events WebSocket also as ?token="},
            "streamKey": {"type": "http", "scheme": "bearer",
                          "description": "A stream key (sk_...) from POST /api/v1/keys, as WHIP publishers send it"},
        }},
    }


def add_openapi_route(app: web.Application, *, gateway: bool) -> None:
    """``GET /api/v1/openapi.json`` (no auth: clients read it before they have a token)."""
    document = openapi_document(gateway=gateway)

    async def serve(_: web.Request) -> web.Response:
        return web.json_response(document)

    app.router.add_get(OPENAPI_PATH, serve)


# -- operations -------------------------------------------------------------------------------------


def _health(b: _Builder) -> None:
    status = {"type": "object", "required": ["status"], "properties": {"status": {"type": "string"}}}
    b.op("get", "/healthz", "healthz", "Liveness: the process answers", "health",
         {"200": _ok("Alive", status)}, security=None)
    ready = {"type": "object", "required": ["status"], "properties": {
        "status": {"type": "string", "enum": ["ready"]}, "node_id": {"type": "string"},
        "state": {"type": "string", "enum": ["ready", "draining"]},
        "nodes": {"type": "array", "items": {"type": "string"}, "description": "gateway: the ready nodes"},
    }}
    b.op("get", "/readyz", "readyz", "Readiness: registered with a registry that answers (gateway: a ready node exists)",
         "health", {"200": _ok("Ready", ready)}, ("503",), security=None)
    b.op("get", "/metrics", "metrics", "Prometheus metrics", "health", {"200": {
        "description": "Prometheus text exposition (OpenMetrics when asked for in Accept)",
        "content": {"text/plain": {"schema": {"type": "string"}},
                    "application/openmetrics-text": {"schema": {"type": "string"}}},
    }}, security=None)
    b.op("get", OPENAPI_PATH, "openapi", "This document", "health",
         {"200": _ok("The OpenAPI document", {"type": "object"})}, security=None)


def _faces(b: _Builder) -> None:
    b.op("get", "/api/v1/faces", "listFaces", "Source faces: the samples, then the caller's uploads", "faces",
         {"200": _ok("Faces", {"type": "array", "items": _ref("Face")})}, ("503",), forwarded=True)
    image = {"type": "string", "format": "binary"}
    photos = {"image/jpeg": {"schema": image}, "image/png": {"schema": image}, "image/webp": {"schema": image},
              "application/octet-stream": {"schema": image},
              "multipart/form-data": {"schema": {"type": "object", "required": ["image"], "properties": {
                  "image": {"type": "array", "items": image, "minItems": 1,
                            "description": "one field per photo, all of one person"}}}}}
    b.op("post", "/api/v1/faces", "uploadFace", "Upload photos of one person (each with exactly one face) as a face",
         "faces", {"201": _ok("The face", _ref("Face"), headers=_location())},
         ("400", "409", "413", "415", "422", "429", "503"),
         params=[{"name": "name", "in": "query", "schema": {"type": "string", "maxLength": 80},
                  "description": "display name (default: the (first) file's name)"}],
         body=photos, forwarded=True,
         description="One photo as the raw body, or a multipart form with a field `image` per photo: several "
                     "photos of one person (say a left and a right profile) are merged into one face, each "
                     "filling what the others did not see, its identity from all. Each photo at most 10 MB and "
                     "4096 px a side; at most `quotas.photos_per_face` photos (default 8). The face id is usable on "
                     "every node of the cluster. 413: a photo too large, or too many photos. 422: a photo with "
                     "no face or several, one of someone else than the photos before it (dlib distance 0.6 or "
                     "more from their mean identity), or one the content gate refused; the error names the "
                     "photo. 409: the caller already keeps the most faces one user may (64); delete one "
                     "(DELETE /api/v1/faces/{face_id}) first.")
    b.op("post", "/api/v1/faces/{face_id}/photos", "addFacePhotos", "Add photos of the person to one of the "
         "caller's uploaded faces", "faces", {"200": _ok("The face, made again from all its photos", _ref("Face"))},
         ("400", "403", "404", "409", "413", "415", "422", "429", "503"), params=[_path_param("face_id")],
         body=photos, forwarded=True,
         description="The photos as for an upload; each must show the face's person (422 naming the photo "
                     "otherwise). The face is made again from all its photos; live sessions wearing it keep "
                     "the face they had until they change face. 403: a sample face. 404: no such face, or "
                     "another user's (the same answer). 409: the face would have more than "
                     "`quotas.photos_per_face` photos, or it was stored before faces kept their photos "
                     "(upload its photos again as a new face).")
    name = {"type": "string", "minLength": 1, "maxLength": 80}
    b.op("patch", "/api/v1/faces/{face_id}", "renameFace", "Rename one of the caller's uploaded faces", "faces",
         {"200": _ok("The face", _ref("Face"))}, ("400", "403", "404", "503"), params=[_path_param("face_id")],
         body=_content({"type": "object", "required": ["name"], "additionalProperties": False,
                        "properties": {"name": name}}), forwarded=True,
         description="400: a name that is empty, over 80 characters or holds control characters. "
                     "403: a sample face. 404: no such face, or another user's (the same answer).")
    b.op("delete", "/api/v1/faces/{face_id}", "deleteFace", "Delete one of the caller's uploaded faces", "faces",
         {"204": _ok("Deleted")}, ("403", "404", "503"), params=[_path_param("face_id")], forwarded=True,
         description="403: a sample face. 404: no such face, or another user's (the same answer). "
                     "Live sessions wearing the face keep it until they change face.")
    b.op("get", "/api/v1/faces/{face_id}/thumbnail.jpg", "faceThumbnail", "The detected face, cropped", "faces",
         {"200": _ok("JPEG", {"type": "string", "format": "binary"}, "image/jpeg")}, ("403", "404", "503"),
         params=[_path_param("face_id"),
                 {"name": "expires", "in": "query", "schema": {"type": "integer"},
                  "description": "with `sig`: when the signed link stops working (unix time)"},
                 {"name": "sig", "in": "query", "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                  "description": "the signature of a `thumbnail_url` from the face list"}],
         forwarded=True,
         description="With a bearer token: the caller's faces and the samples. Without one: the signed "
                     "`thumbnail_url` a face listing returned (for `<img>` tags), valid for minutes. "
                     "403: the signed link has expired (list the faces again). 404: no such face, "
                     "another user's, or a signature that does not match (the same answer).")
    b.paths["/api/v1/faces/{face_id}/thumbnail.jpg"]["get"]["security"] = [{"bearerAuth": []}, {}]


def _placed_header(b: _Builder) -> list[dict[str, Any]]:
    """On a node: the header the gateway sends with a session it placed there."""
    return [] if b.gateway else [{
        "name": "X-Swapcast-Session-Id", "in": "header", "schema": _TOKEN,
        "description": "Set by the gateway: the id it placed the session under on this node; "
                       "409 when the registry shows no such placement for this caller"}]


def _sessions(b: _Builder) -> None:
    sid = [_path_param("session_id")]
    placed_header = _placed_header(b)
    b.op("get", "/api/v1/sessions", "listSessions", "The caller's sessions (admins: all), every protocol", "sessions",
         {"200": _ok("Sessions", {"type": "array", "items": _ref("Session")})}, ("503",))
    b.op("post", "/api/v1/sessions", "createSession", "Create a browser session", "sessions",
         {"201": _ok("Placed (no SDP sent), or connected (the SDP answer)",
                     {"oneOf": [_ref("PlacedSession"), _ref("SdpAnswer")]}, headers=_location())},
         ("400", "404", "409", "503") if placed_header else ("400", "404", "503"), params=placed_header,
         body=_content({"oneOf": [_ref("PlaceSession"), _ref("ConnectSession")]}), forwarded=True,
         description="Without `sdp` the session is placed on a node and waits for its offer "
                     "(POST .../offer); with `sdp` and `type: offer` it connects at once. 404: unknown face_id.")
    b.op("post", "/api/v1/sessions/{session_id}/offer", "offerSession", "Send (or re-send) the browser's SDP offer",
         "sessions", {"201": _ok("The SDP answer, with every server candidate", _ref("SdpAnswer"))},
         ("400", "404", "503"), params=sid, body=_content(_ref("Offer")), forwarded=True,
         description="Also a re-offer after a reconnect, on any node: the session resumes under its id.")
    b.op("post", "/api/v1/sessions/{session_id}/candidates", "addCandidate", "Trickle ICE: one remote candidate",
         "sessions", {"204": _ok("Added")}, ("400", "404", "503"), params=sid, body=_content(_ref("IceCandidate")),
         forwarded=True, description='As RTCIceCandidate.toJSON() gives it; `candidate: ""` ends the candidates.')
    b.op("get", "/api/v1/sessions/{session_id}/preview.jpg", "sessionPreview",
         "The session's newest swapped frame, small (any protocol)", "sessions",
         {"200": _ok("JPEG", {"type": "string", "format": "binary"}, "image/jpeg")}, ("404", "503"), params=sid,
         forwarded=True, description="404 also before the first swapped frame.")
    b.op("get", "/api/v1/sessions/{session_id}/people/{person_id}/thumbnail.jpg", "personThumbnail",
         "A person the session has seen, cropped (map faces)", "sessions",
         {"200": _ok("JPEG", {"type": "string", "format": "binary"}, "image/jpeg")}, ("403", "404", "503"),
         params=[*sid, _path_param("person_id"),
                 {"name": "expires", "in": "query", "schema": {"type": "integer"},
                  "description": "with `sig`: when the signed link stops working (unix time)"},
                 {"name": "sig", "in": "query", "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                  "description": "the signature of a person's `thumbnail_url` in the session's listing"}],
         forwarded=True,
         description="With the owner's (or an admin's) bearer token, or the signed `thumbnail_url` of the "
                     "session's `people` (for `<img>` tags), valid for minutes. 403: the signed link expired. "
                     "404: no such person or session, or another user's (the same answer).")
    b.paths["/api/v1/sessions/{session_id}/people/{person_id}/thumbnail.jpg"]["get"]["security"] = [{"bearerAuth": []}, {}]
    b.op("get", "/api/v1/sessions/{session_id}", "getSession", "One session with its live stats", "sessions",
         {"200": _ok("The session", _ref("Session"))}, ("404", "503"), params=sid, forwarded=True)
    b.op("patch", "/api/v1/sessions/{session_id}", "updateSession", "Change face, options or on/off, live",
         "sessions", {"200": _ok("The new state", _ref("Session"))}, ("400", "404", "503"), params=sid,
         body=_content(_ref("SessionChanges")), forwarded=True)
    b.op("delete", "/api/v1/sessions/{session_id}", "deleteSession", "End a session (its connection and record)",
         "sessions", {"204": _ok("Ended")}, ("404", "503"), params=sid, forwarded=True)


def _whip_whep(b: _Builder) -> None:
    sdp_body = _content({"type": "string"}, SDP)
    b.op("post", "/whip", "whipPublish", "WHIP: publish a stream with a stream key", "whip/whep",
         {"201": _ok("The SDP answer", {"type": "string"}, SDP, headers={**_location(), **_ice_server_links()})},
         ("400", "403", "415", "422", "503") if b.gateway else ("400", "403", "409", "415", "422", "503"),
         security="streamKey", params=_placed_header(b), body=sdp_body, forwarded=True,
         description="The stream key's face and options apply; viewers watch over WHEP. "
                     "401: no key; 403: unknown or revoked key.")
    sid = [_path_param("session_id")]
    ending = ("The publisher's stream key (as WHIP clients send it on DELETE) or the owner's (or an admin's) "
              "bearer token. 404 for any other credential, the same as for an unknown id.")
    b.op("delete", "/whip/{session_id}", "whipDelete", "WHIP: stop publishing", "whip/whep",
         {"204": _ok("Stopped")}, ("404", "503"), security="streamKey", params=sid, forwarded=True, description=ending)
    trickle = "Trickle ICE and ICE restarts are not supported on WHIP/WHEP: send every candidate in the offer"
    trickle_errors = ("404", "405", "503") if b.gateway else ("405",)  # the gateway looks the session up first
    b.op("patch", "/whip/{session_id}", "whipPatch", "WHIP trickle ICE (not supported)", "whip/whep",
         {}, trickle_errors, security=None, params=sid, forwarded=True, description=trickle)
    b.op("post", "/whep/{session_id}", "whepView", "WHEP: watch a session's swapped video", "whip/whep",
         {"201": _ok("The SDP answer", {"type": "string"}, SDP, headers={**_location(), **_ice_server_links()})},
         ("400", "404", "415", "503"), params=sid, body=sdp_body, forwarded=True)
    viewer = [*sid, _path_param("viewer_id")]
    b.op("delete", "/whep/{session_id}/{viewer_id}", "whepDelete", "WHEP: stop watching", "whip/whep",
         {"204": _ok("Stopped")}, ("404", "503"), params=viewer, forwarded=True)
    b.op("patch", "/whep/{session_id}/{viewer_id}", "whepPatch", "WHEP trickle ICE (not supported)", "whip/whep",
         {}, trickle_errors, params=viewer, forwarded=True, description=trickle)


def _keys(b: _Builder) -> None:
    b.op("get", "/api/v1/keys", "listKeys", "The caller's stream keys (admins: all)", "keys",
         {"200": _ok("Stream keys (never the secret)", {"type": "array", "items": _ref("StreamKey")})},
         ("503",), forwarded=True)
    b.op("post", "/api/v1/keys", "createKey", "Create a stream key for RTMP or WHIP publishers", "keys",
         {"201": _ok("The key: `key` is shown this once", _ref("NewStreamKey"), headers=_location())},
         ("400", "403", "404", "409", "503"), body=_content(_ref("StreamKeyRequest")), forwarded=True,
         description="400: a push destination the push policy refuses (users' keys: public addresses only, "
                     "unless the operator allows more in push.allowed_networks / push.allowed_hosts; checked "
                     "again at every connect). 403: `record` (a server path) is for admins only. 404: unknown "
                     "face_id, or another user's (the same answer). 409: the user already holds 64 keys "
                     "(their oldest revoked keys make room).")
    b.op("delete", "/api/v1/keys/{key_id}", "revokeKey", "Revoke a stream key; its publisher is refused from then on",
         "keys", {"204": _ok("Revoked")}, ("404", "503"), params=[_path_param("key_id")], forwarded=True)


def _nodes(b: _Builder) -> None:
    b.op("get", "/api/v1/processors", "listProcessors", "The face processors the answering node loaded", "nodes",
         {"200": _ok("Processors", {"type": "array", "items": _ref("Processor")})}, forwarded=True,
         description="FaceFusion models found in the node's models folder: occluder (XSeg) and parser (BiSeNet) "
                     "keep what covers a face, the enhancer restores swapped faces (offline jobs; live sessions "
                     "when live is true), the content gate refuses source photos and streams over its threshold.")
    b.op("get", "/api/v1/nodes", "listNodes", "Live nodes of the cluster (admin)", "nodes",
         {"200": _ok("Nodes", {"type": "array", "items": _ref("Node")})}, ("403", "503"))
    for action, summary in (("drain", "No new sessions on the node; its sessions go on (admin)"),
                            ("ready", "Take new sessions again (admin)")):
        b.op("post", f"/api/v1/nodes/{{node_id}}/{action}", f"{action}Node", summary, "nodes",
             {"200": _ok("The node", _ref("Node"))}, ("403", "404", "503"),
             params=[_path_param("node_id", _NODE_ID, 'node id ("self": the node answering)')])


def _jobs(b: _Builder) -> None:
    job = {"200": _ok("The job", _ref("Job"))}
    fields = _ref("JobFields")
    b.op("post", "/api/v1/jobs", "submitJob", "Submit an offline video job", "jobs",
         {"201": _ok("Queued", _ref("Job"), headers=_location()),
          "200": _ok("The job an earlier request with the same Idempotency-Key made", _ref("Job"))},
         ("400", "413", "415", "429", "503"),
         params=[{"name": "Idempotency-Key", "in": "header", "schema": {"type": "string", "minLength": 1, "maxLength": 200},
                  "description": "The same key again returns the same job"}],
         body={"multipart/form-data": {"schema": {"allOf": [fields, {"type": "object", "properties": {
                   "video": {"type": "string", "format": "binary"}, "source": {"type": "string", "format": "binary"}}}]}},
               JSON: {"schema": fields}},
         forwarded=True, description="A `video` file (or a `path` inside the job storage) and a `face_id` "
                                     "(or a `source` photo). A user's `path` must be under `users/<subject>/` or "
                                     "in one of their own jobs' folders, and a `face_id` theirs or a sample: "
                                     "anything else is answered like a missing file or face (400). 413: a "
                                     "`source` over 10 MB or 4096 px a side; 415: not a readable image. "
                                     "503 on a node without Redis.")
    b.op("get", "/api/v1/jobs", "listJobs", "Jobs, newest first", "jobs",
         {"200": _ok("Jobs", {"type": "object", "required": ["jobs"],
                              "properties": {"jobs": {"type": "array", "items": _ref("Job")}}})},
         ("400", "503"), params=[{"name": "limit", "in": "query",
                                  "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}}],
         forwarded=True)
    jid = [_path_param("job_id")]
    b.op("get", "/api/v1/jobs/{job_id}", "getJob", "A job's state and progress", "jobs", job, ("404", "503"),
         params=jid, forwarded=True)
    b.op("delete", "/api/v1/jobs/{job_id}", "cancelJob", "Cancel a job", "jobs", job, ("404", "409", "503"),
         params=jid, forwarded=True)
    video = {"type": "string", "format": "binary"}
    videos = {media: {"schema": video} for media in
              ("video/mp4", "video/quicktime", "video/x-matroska", "video/webm", "application/octet-stream")}
    text = {"schema": {"type": "string"}}
    ranges = [{"name": "Range", "in": "header", "schema": {"type": "string"}, "description": "One bytes= range (players seek with it)"},
              {"name": "If-Range", "in": "header", "schema": {"type": "string"}}]
    b.op("get", "/api/v1/jobs/{job_id}/output", "jobOutput", "The finished video", "jobs",
         {"200": {"description": "The swapped video", "content": videos,
                  "headers": {"Accept-Ranges": {"schema": {"type": "string", "enum": ["bytes"]}}, "ETag": text,
                              "Content-Disposition": {"schema": {"type": "string"}, "description":
                                  "attachment; filename=\"<ASCII>\" (RFC 6266), with filename*=UTF-8''<name> "
                                  "when the name is not plain ASCII"}}},
          "206": {"description": "The part of the video the Range header asks for", "content": videos,
                  "headers": {"Content-Range": {"required": True,
                                                "schema": {"type": "string", "pattern": r"^bytes \d+-\d+/\d+$"}}}},
          "416": {"description": "A Range past the end, an empty one (bytes=-0), or not one bytes= range",
                  "headers": {"Content-Range": {"required": True,
                                                "schema": {"type": "string", "pattern": r"^bytes \*/\d+$"}}}}},
         ("404", "409", "503"), params=[*jid, *ranges], forwarded=True)


def _provenance(b: _Builder) -> None:
    upload = {"type": "string", "format": "binary"}
    number, boolean, text = {"type": "number"}, {"type": "boolean"}, {"type": "string"}
    verdict = {"type": "object", "required": ["source", "kind", "watermark", "c2pa", "exit_code"], "properties": {
        "source": text, "kind": {"type": "string", "enum": ["image", "video", "stream"]},
        "watermark": {"type": "object", "properties": {
            "found": boolean,
            "payload": _nullable({"type": "object", "properties": {
                "issuer": {"type": "integer"}, "stream_hash": text, "hour_utc": text}}),
            "confidence": {"type": "object", "properties": {"sync_z": number, "chip_agreement": number}},
            "frames": {"type": "integer"}}},
        "c2pa": {"type": "object", "properties": {
            "present": boolean, "state": _nullable(text), "valid": boolean,
            "failures": {"type": "array", "items": text}, "actions": {"type": "array", "items": {"type": "object"}},
            "generator": _nullable(text)}},
        "exit_code": {"type": "integer", "enum": [0, 1, 3]}}}
    b.op("post", "/api/v1/provenance/verify", "verifyProvenance",
         "Is swapcast's watermark in this image or video, and does its C2PA manifest validate", "provenance",
         {"200": _ok("What was found (exit_code as the CLI's: 0 marked, 1 no mark, 3 C2PA manifest invalid)", verdict)},
         ("400", "413", "415", "422"),
         params=[{"name": "name", "in": "query", "schema": {"type": "string", "maxLength": 200},
                  "description": "the file's name, whose extension says what it is (else the Content-Type)"}],
         body={"image/jpeg": {"schema": upload}, "image/png": {"schema": upload}, "image/webp": {"schema": upload},
               "application/octet-stream": {"schema": upload},
               "multipart/form-data": {"schema": {"type": "object", "required": ["file"], "properties": {"file": upload}}}},
         forwarded=True, description="The file as the body, or a multipart form with the field `file`; at most "
                                     "200 MB. A video's Content-Type (video/mp4, video/quicktime, video/x-matroska, "
                                     "video/webm, video/x-flv) works as well as `?name=`. 415: neither the name nor "
                                     "the Content-Type says image or video. 422: the upload cannot be read as one, "
                                     "or is under 64x64.")


def _events(b: _Builder) -> None:
    b.op("get", "/api/v1/events", "events", "WebSocket of session events and live stats", "events",
         {"101": _ok("Switching to the WebSocket")}, ("426", "429"),
         params=[{"name": "token", "in": "query", "schema": {"type": "string"},
                  "description": "The bearer JWT (browsers cannot set headers on a WebSocket)"}],
         description=(
             'JSON text messages: {"type": "snapshot", "sessions": [Session], "nodes": [Node] (admins only)} '
             'at once and every second; {"type": "session_started" | "session_ended", "session": Session} when '
             'a session appears or goes; {"type": "people", "session_id", "people": [Person]} when the people a '
             "session sees change (someone new, on or off screen, what they wear). Closed with 1001 when the "
             "server shuts down."))


# -- schemas ----------------------------------------------------------------------------------------


def _schemas(gateway: bool) -> dict[str, Schema]:
    string, number, integer, boolean = {"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": "boolean"}
    options = {"type": "object", "additionalProperties": False, "description": "Swap option overrides", "properties": {
        "face_selection": {"type": "string", "enum": ["all", "largest"],
                           "description": "which target faces to swap (live sessions take no reference photo)"},
        "reference_threshold": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 2},
        "mouth_mask": boolean, "blend": {"type": "number", "minimum": 0, "maximum": 1},
        "feather": {"type": "number", "minimum": 0, "maximum": 0.5}, "colour_match": boolean, "smoothing": boolean,
        "occlusion": {"type": "string", "enum": ["auto", "objects", "off"],
                      "description": "keep what is in front of a face in front (auto: its own glasses too; objects: not them)"},
        "eyes": {"type": "string", "enum": ["target", "source"],
                 "description": "mesh3d: draw the source's eyes, blinking with the target's lids (default), or keep the target's own (its gaze)"},
        "faces_map": {"type": "object", "maxProperties": 16, "additionalProperties": string,
                      "description": "map faces: {person: face id or \"keep\"}; a person is an id the session "
                                     "reported (person-2; not on stream keys) or the face id of a reference photo of "
                                     "them (matched by identity under reference_threshold). Replaced whole by a PATCH"},
        "unmapped": {"type": "string", "enum": ["source", "keep"],
                     "description": "people faces_map does not name: the session's face (source) or as they are"},
    }}
    person = {"type": "object", "required": ["id", "on_screen", "wears"], "properties": {
        "id": {"type": "string", "example": "person-2"}, "on_screen": boolean,
        "since": _nullable({"type": "string", "format": "date-time"}), "frames": integer,
        "first_seen_s": _nullable(number), "last_seen_s": _nullable(number),
        "wears": {"type": "string", "description": "a face id, \"keep\", or \"source\" (the session's face)"},
        "thumbnail_url": _nullable({"type": "string", "description": "signed for `<img>`, expires after minutes"})}}
    stats = {"type": "object", "description": "Live numbers (fps, latency, per-stage ms, frame counters)",
             "properties": {name: _nullable(number) for name in (
                 "fps_in", "fps_out", "latency_ms", "latency_p50_ms", "latency_p99_ms", "swap_ms")}
             | {name: integer for name in ("frames_in", "frames_out", "frames_dropped", "decode_errors", "swap_errors",
                                           "frames_unswapped_busy", "faces_seen", "faces_swapped")}
             | {"stages_ms": _nullable({"type": "object", "additionalProperties": number})}}
    created = {"anyOf": [{"type": "string", "format": "date-time"}, number],
               "description": "ISO 8601 (a node's view) or Unix time (the registry's, behind a gateway)"} if gateway \
        else {"type": "string", "format": "date-time"}
    ice_servers = {"type": "array", "description": "RTCIceServer entries for this session's peer connection: STUN, "
                   "and TURN with a username/credential that expire (webrtc.turn_ttl_s); fresh ones on every read",
                   "items": {"type": "object", "required": ["urls"], "properties": {
                       "urls": {"type": "array", "items": string}, "username": string, "credential": string}}}
    session = {"type": "object", "required": ["id", "protocol"], "properties": {
        "ice_servers": ice_servers,
        "id": string, "protocol": {"type": "string", "enum": ["webrtc", "whip", "rtmp"]}, "created": created,
        "face_id": _nullable(string), "enabled": boolean, "options": {"type": "object"},
        "state": {"type": "string", "enum": ["placed", "live", "orphaned"]},
        "connection": {"type": "string", "description": "the peer connection's state"},
        "node_id": string, "owner": string, "label": _nullable(string), "viewers": integer,
        "stats": _nullable(stats),
        "people": {"type": "array", "items": person, "description": "who the swap has seen (map faces): on screen first, "
                   "in the order first seen, then the others, most recently seen first"},
    }}
    face_id = {"type": "string", "minLength": 1, "example": "astronaut"}
    return {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": string}},
        "Face": {"type": "object", "required": ["id", "name", "thumbnail_url"], "properties": {
            "id": string, "name": string,
            "thumbnail_url": {"type": "string", "description": "a link an <img> can load without the token: "
                              "signed for this face and owner, it expires after minutes"},
            "owner": {"type": "string", "description": "the user who uploaded it; empty: everyone's (samples)"},
            "photos": {"type": "integer", "minimum": 1, "description": "how many photos of the person it is made of"}}},
        "SwapOptions": options,
        "Session": session,
        "PlaceSession": {"type": "object", "required": ["face_id"], "additionalProperties": False,
                         "properties": {"face_id": face_id, "options": _ref("SwapOptions")}},
        "ConnectSession": {"type": "object", "required": ["face_id", "sdp", "type"], "additionalProperties": False,
                           "properties": {"face_id": face_id, "options": _ref("SwapOptions"),
                                          "sdp": string, "type": {"type": "string", "enum": ["offer"]}}},
        "PlacedSession": {"type": "object", "required": ["session_id", "state", "offer_url"], "properties": {
            "session_id": string, "state": {"type": "string", "enum": ["placed"]}, "node_id": string,
            "offer_url": string, "ice_servers": ice_servers}},
        "Offer": {"type": "object", "required": ["sdp", "type"],
                  "properties": {"sdp": string, "type": {"type": "string", "enum": ["offer"]}}},
        "SdpAnswer": {"type": "object", "required": ["session_id", "sdp", "type"], "properties": {
            "session_id": string, "sdp": string, "type": {"type": "string", "enum": ["answer"]}}},
        "IceCandidate": {"type": "object", "required": ["candidate"], "properties": {
            "candidate": string, "sdpMid": _nullable(string), "sdpMLineIndex": _nullable(integer),
            "usernameFragment": _nullable(string)}},
        "SessionChanges": {"type": "object", "minProperties": 1, "additionalProperties": False, "properties": {
            "enabled": boolean, "face_id": face_id, "options": _ref("SwapOptions")}},
        "Node": {"type": "object", "required": ["id", "address", "state", "capacity", "load"], "properties": {
            "id": string, "address": string, "rtmp_address": string, "gpu": string, "capacity": integer,
            "state": {"type": "string", "enum": ["ready", "draining"]}, "load": integer, "queue_delay_ms": number,
            "stats": {"type": "object"}, "started": number, "last_seen": number,
            "processors": {"type": "array", "items": _ref("Processor")}}},
        "Processor": {"type": "object", "required": ["kind", "model"], "properties": {
            "kind": {"type": "string", "enum": ["occluder", "parser", "enhancer", "content_gate"]},
            "model": {"type": "string", "description": "the file's name without .onnx, e.g. xseg_1, gfpgan_1.4"},
            "keep_regions": {"type": "array", "items": string, "description": "parser: regions that stay the target's"},
            "blend": number, "live": boolean, "size": integer, "weight": number, "live_budget_ms": number,
            "threshold": number, "sample_s": number}},
        "StreamKey": {"type": "object", "required": ["key_id", "name", "created", "revoked", "owner"], "properties": {
            "key_id": string, "name": string, "face_id": _nullable(string), "owner": string, "created": number,
            "revoked": _nullable(number), "active": boolean, "push": {"type": "array", "items": string},
            "record": _nullable(string), "options": {"type": "object"},
            "play_token": {"type": "string", "description": "plays the swapped stream: rtmp://host/live/<play_token>"}}},
        "StreamKeyRequest": {"type": "object", "required": ["name", "face_id"], "additionalProperties": False,
                             "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 80}, "face_id": face_id,
            "options": _ref("SwapOptions"),
            "push": {"type": "array", "items": {"type": "string", "pattern": "^rtmps?://"},
                     "description": "re-publish the swapped stream to these RTMP URLs (users: public hosts "
                                    "only, unless the push policy allows more)"},
            "record": {"type": "string", "description": "admins only: record to this server path"}}},
        "NewStreamKey": {"allOf": [_ref("StreamKey"), {"type": "object", "required": ["key"], "properties": {
            "key": {"type": "string", "description": "the secret: OBS's stream key, WHIP's bearer token"},
            "rtmp_app": string, "whip_path": string}}]},
        "JobFields": {"type": "object", "additionalProperties": False, "properties": {
            "face_id": string, "path": {"type": "string", "description": "a video inside the job storage "
                                                                    "(users: under users/<subject>/ or their own jobs')"},
            "priority": {"type": "string", "enum": ["high", "normal", "low"]},
            "webhook_url": {"type": "string", "description": "POSTed (HMAC-signed) when the job ends (users: "
                                                              "a public address, as for push destinations)"},
            "faces_map": {"type": "string", "description": "map faces: JSON {reference face id: face id or \"keep\"} "
                                                            "(an object in a JSON body): people named by a photo of them, "
                                                            "the same person in every chunk"},
            "unmapped": {"type": "string", "enum": ["source", "keep"],
                         "description": "people faces_map does not name: the job's face, or as they are"}}},
        "Job": {"type": "object", "required": ["id", "state", "progress"], "properties": {
            "id": string, "state": {"type": "string", "enum": ["pending", "processing", "completed", "failed", "cancelled"]},
            "progress": number, "error": _nullable(string),
            "priority": {"type": "string", "enum": ["high", "normal", "low"]}, "face_id": _nullable(string),
            "source": _nullable({"type": "string", "enum": ["upload", "face_id"]}), "input": string,
            "chunks": {"type": "object", "properties": {"total": integer, "done": integer}},
            "frames": _nullable(integer), "duration_s": _nullable(number), "has_audio": _nullable(boolean),
            "created": number, "updated": number, "finished": _nullable(number), "output": _nullable(string),
            "webhook_url": _nullable(string), "webhook_status": _nullable(string),
            "faces_map": {"type": "object", "additionalProperties": string}, "unmapped": string}},
    }
