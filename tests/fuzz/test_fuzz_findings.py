"""What ``swapcast bench fuzz`` found, one reproducer each, replayed against an in-process
node: every one must be a 4xx with a reason and leave no traceback in the log."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp.test_utils import TestClient, TestServer

from signaling.auth import mint_token
from streamer.webrtc.errors import BadRequestError
from streamer.webrtc.offers import parse_offer
from swapcast.app import build_app
from swapcast.benchmarks.fuzz.node import build_request, send_raw
from swapcast.benchmarks.fuzz.sdp import make_offers
from swapcast.config import load_config
from swapcast.logs import ClientFaultFilter

SECRET = "fuzz-findings-" + "s" * 40
ALICE = {"Authorization": f"Bearer {mint_token(SECRET, 'alice')}"}
SHUTDOWN_S = 20.0


def run(coroutine, timeout: float = 60.0):
    async def bounded():
        return await asyncio.wait_for(coroutine, timeout)

    return asyncio.run(bounded())


@pytest.fixture(scope="module")
def offer() -> str:
    return run(make_offers())["browser"]


def _sections(sdp: str) -> tuple[list[str], list[list[str]]]:
    lines = sdp.strip().split("\r\n")
    starts = [i for i, line in enumerate(lines) if line.startswith("m=")]
    return lines[:starts[0]], [lines[a:b] for a, b in zip(starts, [*starts[1:], len(lines)])]


def _join(head: list[str], sections: list[list[str]]) -> str:
    return "\r\n".join(head + [line for section in sections for line in section]) + "\r\n"


def flooded(sdp: str) -> str:
    """The fuzzer's 'media-flood': the media sections copied 10 times (mids repeat)."""
    head, sections = _sections(sdp)
    return _join(head, sections * 10)


def audio_line_dropped(sdp: str) -> str:
    """The audio m= line deleted: its attributes (a=mid:1 too) fall into the video section,
    so BUNDLE names a mid no section has."""
    return "\r\n".join(line for line in sdp.split("\r\n") if not line.startswith("m=audio")) + "\r\n"


def second_mid(sdp: str) -> str:
    """A second a=mid in the video section, not in the BUNDLE group."""
    head, sections = _sections(sdp)
    sections[0] = sections[0] + ["a=mid:" + "m" * 40]
    return _join(head, sections)


def odd_candidate(sdp: str) -> str:
    """The fuzzer's mutated candidate: an unknown type with a "%" in it (aioice's own log
    line for it then fails with a logging traceback)."""
    head, sections = _sections(sdp)
    sections[0] = sections[0] + ["a=candidate:1 1 udp 2122260223 127.0.0.1 9 typ z%sz"]
    return _join(head, sections)


@pytest.mark.parametrize("damage", [flooded, audio_line_dropped, second_mid, odd_candidate])
def test_offers_aiortc_cannot_answer_are_refused_before_any_peer_connection(offer, damage):
    with pytest.raises(BadRequestError):
        parse_offer(damage(offer), "send")
    parse_offer(offer, "send")  # the undamaged offer passes


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _node_app(tmp_path, redis_url: str | None = None, engine=None):
    overrides = {"server": {"data_dir": str(tmp_path)}, "rtmp": {"port": 0}, "auth": {"jwt_secret": SECRET},
                 "webrtc": {"host_addresses": ["127.0.0.1"]}}
    if redis_url:
        overrides["cluster"] = {"redis_url": redis_url}
    return build_app(load_config(environ={}, overrides=overrides), engine=engine)


def _replay(tmp_path, engine, requests: list[bytes], redis_url: str | None = None,
            misframed: bool = False) -> tuple[list[int], list[logging.LogRecord]]:
    """Send raw requests to a node; their statuses and what the node logged at WARNING or
    above. ``misframed``: the requests promise more body than they carry (the client hangs up)."""
    records = _Records()
    loggers = [logging.getLogger(name) for name in ("aiohttp.server", "streamer", "signaling", "asyncio")]
    server_log = logging.getLogger("aiohttp.server")
    quiet = ClientFaultFilter()
    server_log.addFilter(quiet)  # installed by swapcast's logging set-up in a real node
    for logger in loggers:
        logger.addHandler(records)

    async def scenario() -> list[int]:
        client = TestClient(TestServer(_node_app(tmp_path, redis_url, engine), host="127.0.0.1"))
        await client.start_server()
        try:
            statuses = [(await send_raw(client.port, raw, timeout=30, misframed=misframed)).status for raw in requests]
            await asyncio.sleep(0.5)  # the node notices a client that hung up
            return statuses
        finally:
            try:
                await asyncio.wait_for(client.close(), SHUTDOWN_S)
            except TimeoutError:  # seen with Redis: NodeAgent.close waits on its pub/sub read for ever
                raise AssertionError(f"the node did not shut down within {SHUTDOWN_S} s") from None

    try:
        statuses = run(scenario())
    finally:
        for logger in loggers:
            logger.removeHandler(records)
        server_log.removeFilter(quiet)
    return statuses, [r for r in records.records if r.levelno >= logging.WARNING]


def _session_request(sdp: str) -> bytes:
    import json

    body = json.dumps({"face_id": "astronaut", "sdp": sdp, "type": "offer"}).encode()
    headers = [(b"Authorization", ALICE["Authorization"].encode()), (b"Content-Type", b"application/json")]
    return build_request(b"POST", b"/api/v1/sessions", headers, body)


def test_offers_that_broke_the_answer_are_400s_without_tracebacks(tmp_path, engine, offer):
    damaged = [flooded(offer), audio_line_dropped(offer), second_mid(offer)]
    statuses, logged = _replay(tmp_path, engine, [_session_request(sdp) for sdp in damaged])
    assert statuses == [400, 400, 400]
    assert not [r for r in logged if r.levelno >= logging.ERROR or r.exc_info], [r.getMessage() for r in logged]


def test_unparsable_requests_and_clients_gone_mid_body_log_one_quiet_line(tmp_path, engine):
    token = ALICE["Authorization"].split()[1].encode()
    bad_url = b"DELETE /whip/x?\xff=" + token + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    cut_short = build_request(b"POST", b"/api/v1/keys", [(b"Authorization", ALICE["Authorization"].encode()),
                                                          (b"Content-Type", b"application/json")], b'{"na',
                              content_length=b"1000")
    records = _Records()
    logging.getLogger("aiohttp.server").addHandler(records)
    try:
        statuses, logged = _replay(tmp_path, engine, [bad_url])
        _, logged_cut = _replay(tmp_path, engine, [cut_short], misframed=True)
    finally:
        logging.getLogger("aiohttp.server").removeHandler(records)
    assert statuses == [400]
    assert logged + logged_cut == [], [r.getMessage() for r in logged + logged_cut]
    text = "\n".join(r.getMessage() for r in records.records)
    assert "unparsable HTTP request" in text and token.decode() not in text


def test_a_face_upload_whose_file_name_is_not_utf8_is_a_400(tmp_path, engine, grace_image):
    import cv2

    jpeg = cv2.imencode(".jpg", cv2.cvtColor(grace_image, cv2.COLOR_RGB2BGR))[1].tobytes()
    body = (b'--b\r\nContent-Disposition: form-data; name="image"; filename="\xff\xfe.jpg"\r\n\r\n' + jpeg
            + b"\r\n--b--\r\n")
    raw = build_request(b"POST", b"/api/v1/faces", [(b"Authorization", ALICE["Authorization"].encode()),
                                                    (b"Content-Type", b"multipart/form-data; boundary=b")], body)
    statuses, logged = _replay(tmp_path, engine, [raw])
    assert statuses == [400]
    assert logged == [], [r.getMessage() for r in logged]


def test_a_job_upload_cut_short_is_a_400(tmp_path, engine, redis_url):
    """Found by the fuzzer's upload layer (reproducer trimmed from findings/0001-upload.bin):
    a multipart job upload whose last part never ends (no closing delimiter) is a 500, with
    aiohttp's 'ValueError: Reading after EOF' from signaling/jobs/uploads.py in the log."""
    body = (b'----\r\nContent-Disposition: form-data; name="face_id"\r\n\r\nastronaut\r\n'
            b'----\r\nContent-Disposition: form-data; name="source"; filename="me.jpg"\r\n'
            b"Content-Type: text/plain\r\n\r\n\xff\xd8\xff\xe0\x00\x10JFIF" + b"\x00" * 200)
    raw = build_request(b"POST", b"/api/v1/jobs", [(b"Authorization", ALICE["Authorization"].encode()),
                                                   (b"Content-Type", b"multipart/form-data; boundary=--")], body)
    statuses, logged = _replay(tmp_path, engine, [raw], redis_url=redis_url)
    assert statuses == [400]
    assert not [r for r in logged if r.levelno >= logging.ERROR], [r.getMessage() for r in logged]
