"""Cross-origin access (CORS) to the API, WHIP and WHEP, for pages served from other origins.

An app on https://app.example.com that embeds a WHIP publisher or a WHEP player, or calls
the API of https://swap.example.com, needs the browser's leave: a pre-flight ``OPTIONS``
answered for its origin, then ``Access-Control-Allow-Origin`` on every answer and
``Access-Control-Expose-Headers`` naming ``Location`` (the WHIP resource), ``Link`` (RFC 9725
ICE servers) and ``ETag``, or fetch() fails or cannot read them.

CORS only lets the browser hand an answer to the page; every route still wants its token or
stream key. Swapcast authenticates with the ``Authorization`` header and never with cookies,
so it never sends ``Access-Control-Allow-Credentials``, and ``"*"`` answers ``*`` rather
than echoing whatever origin asked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

from aiohttp import hdrs, web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ANY_ORIGIN = "*"
METHODS = ("GET", "HEAD", "POST", "PATCH", "DELETE")
# what pages send: the token, JSON/SDP bodies, conditional and ranged downloads (job outputs),
# and the safelisted ones browsers still name when their values are unusual
REQUEST_HEADERS = ("authorization", "content-type", "if-match", "if-none-match", "if-range", "range",
                   "accept", "accept-language", "content-language")
EXPOSED_HEADERS = ("Location", "Link", "ETag", "Retry-After", "WWW-Authenticate", "Content-Range", "Accept-Ranges")
MAX_AGE_S = 600  # how long a browser may reuse a pre-flight (Chromium caps it at 7200)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def in_scope(path: str) -> bool:
    """The routes pages on other origins may call: the API, WHIP and WHEP (not the pages,
    health checks or metrics)."""
    return path == "/whip" or path.startswith(("/api/", "/whip/", "/whep/"))


def is_preflight(request: web.Request) -> bool:
    return (request.method == hdrs.METH_OPTIONS and hdrs.ORIGIN in request.headers
            and hdrs.ACCESS_CONTROL_REQUEST_METHOD in request.headers)


def origin_of(text: str) -> str:
    """``text`` checked to be a browser's serialized origin (``scheme://host[:port]``, lower
    case, no default port, no path); ``ValueError`` saying how to write it otherwise."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an origin: {exc}") from None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{text!r} is not an origin: expected http(s)://host[:port], e.g. https://app.example.com")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment \
            or parts.path not in ("", "/"):
        raise ValueError(f"{text!r} is not an origin: an origin has no user, path, query or fragment")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    origin = f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, _DEFAULT_PORTS[parts.scheme]) else "")
    if origin != text:
        raise ValueError(f"{text!r} is not written as browsers send it: use {origin!r}")
    return origin


class CorsPolicy:
    """Which origins may read the answers of the cross-origin routes (``in_scope``): none
    (same origin only, the default), a list, or any (``["*"]``)."""

    def __init__(self, origins: Iterable[str] = ()) -> None:
        listed = list(origins)
        self.any_origin = ANY_ORIGIN in listed
        if self.any_origin and len(listed) > 1:
            raise ValueError('"*" (any origin) goes alone, not with other origins')
        self.origins = frozenset() if self.any_origin else frozenset(origin_of(o) for o in listed)

    def allowed(self, origin: str) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for a request from ``origin`` (None: not
        allowed). ``*`` for any origin: never an echo of an arbitrary caller."""
        if self.any_origin:
            return ANY_ORIGIN
        return origin if origin in self.origins else None

    def install(self, app: web.Application) -> None:
        """Answer pre-flights first (outermost middleware: a browser sends no token with
        one, so auth must not see them) and label answers as they are sent. The labels go on
        in ``on_response_prepare`` since the gateway streams a node's answer from inside its
        handler, with the headers already on their way when a middleware would see it."""
        app.middlewares.insert(0, self.answer_preflight)
        app.on_response_prepare.append(self.label)

    @web.middleware
    async def answer_preflight(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not (is_preflight(request) and in_scope(request.path)):
            return await handler(request)
        origin = request.headers[hdrs.ORIGIN]
        allowed = self.allowed(origin)
        if allowed is None:
            why = ("cross-origin calls are off (same origin only)" if not self.origins
                   else "it is not in the allowed origins")
            return self._refuse(f"origin {origin!r} may not call this server: {why}; an operator lists "
                                "the page's origin in server.cors_origins")
        method = request.headers[hdrs.ACCESS_CONTROL_REQUEST_METHOD]
        if method not in METHODS:
            return self._refuse(f"method {method!r} is not allowed cross-origin (allowed: {', '.join(METHODS)})")
        asked = request.headers.get(hdrs.ACCESS_CONTROL_REQUEST_HEADERS, "")
        unknown = sorted({h.strip().lower() for h in asked.split(",") if h.strip()} - set(REQUEST_HEADERS))
        if unknown:
            return self._refuse(f"request header(s) {', '.join(unknown)} not allowed cross-origin "
                                f"(allowed: {', '.join(REQUEST_HEADERS)})")
        # no Link here: ICE servers (TURN credentials) only on an authenticated 201
        headers = {
            hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: allowed,
            hdrs.ACCESS_CONTROL_ALLOW_METHODS: ", ".join(METHODS),
            hdrs.ACCESS_CONTROL_ALLOW_HEADERS: ", ".join(REQUEST_HEADERS),
            hdrs.ACCESS_CONTROL_MAX_AGE: str(MAX_AGE_S),
        }
        if not self.any_origin:
            headers[hdrs.VARY] = "Origin"
        return web.Response(status=204, headers=headers)

    def _refuse(self, reason: str) -> web.Response:
        return web.json_response({"error": reason}, status=403, headers={hdrs.VARY: "Origin"})

    async def label(self, request: web.Request, response: web.StreamResponse) -> None:
        """``Access-Control-Allow-Origin`` (the matched origin, or ``*``) and the headers
        pages may read, on every answer of an in-scope route, errors included (so a page can
        read a 401's or 429's reason). Whatever ``Access-Control-*`` a node put on an answer
        the gateway relays is dropped: the policy of the address the browser called applies."""
        if not in_scope(request.path) or is_preflight(request):
            return
        for name in {n for n in response.headers if n.lower().startswith("access-control-")}:
            response.headers.popall(name)
        if self.origins:
            vary = {name.strip().lower() for value in response.headers.getall(hdrs.VARY, ())
                    for name in value.split(",")}
            if "origin" not in vary and "*" not in vary:
                response.headers.add(hdrs.VARY, "Origin")
        origin = request.headers.get(hdrs.ORIGIN)
        allowed = self.allowed(origin) if origin is not None else None
        if allowed is not None:
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = allowed
            response.headers[hdrs.ACCESS_CONTROL_EXPOSE_HEADERS] = ", ".join(EXPOSED_HEADERS)
