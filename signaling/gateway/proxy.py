"""Talking to nodes: forward one client request to a node and stream the answer back, fetch a
node's JSON, and the failover policy for a node that cannot be reached.

"Unreachable" is decided at connect time only (refused, reset or timed out before the
request went out): only then is it certain the node did nothing with the request, so it is
safe to declare the node dead and send the same request elsewhere. Any failure after the
request went out is a 502 for this request alone. Connections to nodes are therefore never
pooled: a pooled connection to a node that has just died fails like a mid-request drop, and
the gateway could not tell a dead node from a request that failed half-way.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, MultiMapping

from signaling.log_safety import quoted
from signaling.registry.base import NodeInfo, Registry, SessionRecord

log = logging.getLogger(__name__)

SESSION_HEADER = "X-Swapcast-Session-Id"
NODE_HEADER = "X-Swapcast-Node"  # on every forwarded answer: which node served it
CHUNK_BYTES = 64 * 1024
# RFC 9110 §7.6.1 connection-specific headers; plus Host (aiohttp sets the node's) and
# Expect (the gateway already answered the client's 100-continue when it read the body)
_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade", "host", "expect",
})  # fmt: skip

Body = bytes | aiohttp.StreamReader
T = TypeVar("T")


class NodeUnreachable(Exception):
    """The node could not be connected to: it is dead as far as the gateway can tell."""

    def __init__(self, node: NodeInfo, reason: str) -> None:
        super().__init__(f"node {node.id} ({node.address}) is unreachable: {reason}")
        self.node = node


class NodeFailed(Exception):
    """The node took the request but did not answer properly (HTTP 502 for this request)."""

    def __init__(self, node: NodeInfo, reason: str) -> None:
        super().__init__(f"node {node.id} ({node.address}) failed: {reason}")
        self.node = node


def end_to_end_headers(headers: MultiMapping[str]) -> CIMultiDict[str]:
    """``headers`` without hop-by-hop ones, including any the Connection header names."""
    named = {token.strip().lower() for value in headers.getall("Connection", ()) for token in value.split(",")}
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in _HOP_BY_HOP | named)


class NodeClient:
    """HTTP client of the nodes. ``connect_timeout_s`` bounds reaching a node (past it the
    node is unreachable); ``read_timeout_s`` bounds each wait for the node's next bytes, so a
    long upload or download is fine as long as it moves."""

    def __init__(self, *, connect_timeout_s: float, read_timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        # auto_decompress off: bytes and Content-Encoding pass through together, unchanged
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True), timeout=self._timeout, auto_decompress=False,
        )

    async def close(self) -> None:
        await self._session.close()

    async def forward(self, request: web.Request, node: NodeInfo, *, body: Body, session_id: str | None = None,
                      on_answer: Callable[[int], Awaitable[None]] | None = None) -> web.StreamResponse:
        """Send ``request`` (method, path, query, end-to-end headers, ``body``) to ``node`` and
        stream its answer back unchanged. ``session_id`` goes in ``X-Swapcast-Session-Id``
        (only the gateway sets it: a client's own is dropped). ``on_answer(status)`` runs once
        the node's status is known, before anything reaches the client. Raises
        ``NodeUnreachable`` (nothing was sent to the node) or ``NodeFailed`` (no answer came)."""
        headers = end_to_end_headers(request.headers)
        headers.popall(SESSION_HEADER, None)
        if session_id is not None:
            headers[SESSION_HEADER] = session_id
        if isinstance(body, bytes):
            headers.popall("Content-Length", None)  # aiohttp sets it from the held bytes
        headers["X-Forwarded-For"] = ", ".join(filter(None, [request.headers.get("X-Forwarded-For"), request.remote]))
        headers.setdefault("X-Forwarded-Host", request.host)
        headers.setdefault("X-Forwarded-Proto", request.scheme)
        url = f"http://{node.address}{request.rel_url}"
        # held bytes are sent from a fresh file-like each time (a retry sends them again)
        data = io.BytesIO(body) if isinstance(body, bytes) else body
        try:
            upstream = await self._session.request(request.method, url, headers=headers, data=data,
                                                   allow_redirects=False)
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise NodeUnreachable(node, str(exc) or type(exc).__name__) from None
        except aiohttp.SocketTimeoutError:
            raise NodeFailed(node, f"no answer within {self._timeout.sock_read:g} s") from None
        except aiohttp.ClientError as exc:
            raise NodeFailed(node, str(exc) or type(exc).__name__) from None
        async with upstream:
            if on_answer is not None:
                await on_answer(upstream.status)
            return await _relay(request, node, upstream)

    async def get_json(self, node: NodeInfo, path: str, *, timeout_s: float,
                       headers: dict[str, str] | None = None) -> Any:
        """The node's JSON answer to ``GET path``; raises ``NodeFailed`` for anything else."""
        try:
            timeout = aiohttp.ClientTimeout(total=timeout_s)
            async with self._session.get(f"http://{node.address}{path}", timeout=timeout, headers=headers) as answer:
                if answer.status != 200:
                    raise NodeFailed(node, f"GET {path} answered {answer.status}")
                return await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise NodeFailed(node, f"GET {path}: {exc or type(exc).__name__}") from None


async def _relay(request: web.Request, node: NodeInfo, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    response.headers.update(end_to_end_headers(upstream.headers))
    response.headers[NODE_HEADER] = node.id
    await response.prepare(request)
    try:
        async for chunk in upstream.content.iter_chunked(CHUNK_BYTES):
            await response.write(chunk)
    except (aiohttp.ClientError, TimeoutError) as exc:
        # The status line is out: the only honest signal left is cutting the connection,
        # so the client sees a truncated answer instead of a complete-looking one.
        log.warning("%s %s: node %s broke off its answer (%s)", request.method, quoted(request.path), node.id, exc)
        if request.transport is not None:
            request.transport.close()
        return response
    await response.write_eof()
    return response


async def on_session_node(registry: Registry, record: SessionRecord, node: NodeInfo | None,
                          attempt: Callable[[SessionRecord, NodeInfo], Awaitable[T]], *, retries: int) -> T:
    """Run ``attempt(record, node)`` on the session's node. With ``node`` None the session is
    placed first. When the node turns out unreachable it is removed from the registry (its
    sessions move) and the session is placed again, excluding every node that failed, up to
    ``retries`` times; then the last ``NodeUnreachable`` is raised. Registry errors
    (``RegistryUnavailable``, ``NoCapacityError``) propagate."""
    failed: list[str] = []
    unreachable = 0
    while True:
        if node is None:
            record = await registry.place_session(record, exclude=failed)
            node = await registry.node(record.node_id)
            if node is None:  # died between the placement and now
                failed.append(record.node_id)
                continue
        try:
            return await attempt(record, node)
        except NodeUnreachable as exc:
            unreachable += 1
            moved = await registry.remove_node(exc.node.id)
            log.warning("%s; removed it (%d session(s) moved), session %s goes elsewhere", exc, len(moved), record.id)
            failed.append(exc.node.id)
            if unreachable > retries:
                raise
            # remove_node already re-placed the session: keep that node unless it failed too
            record = await registry.get_session(record.id) or record
            node = await registry.node(record.node_id) if record.node_id and record.node_id not in failed else None
