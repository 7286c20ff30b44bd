"""The operator's log cannot be forged nor made to hold a secret by what clients choose.

Round 3 wrote a key named ``"cam\\nERROR signaling.auth.middleware: ..."`` into the log raw
when it published (a line of its own, reading like the auth middleware's), and logged the
whole stream key of every refused publish and play. Here hostile names reach the log every
way they can (a key stored before names were checked, RTMP app and stream names, a refused
key, a path), and the log is read back: every line is a record's own first line or an
indented traceback line, and no stream key or play token is there whole."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import sys
from pathlib import Path

import pytest
from media_fixtures import camera_messages

from signaling.stream_keys import hash_key
from streamer.rtmp.client import RtmpClientError, RtmpPlayClient, RtmpPublishClient
from swapcast.app import NODE_KEY
from swapcast.logs import JsonFormatter, TextFormatter, TEXT_FORMAT

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))
from webrtc_harness import bearer, node, run, settle  # noqa: E402

pytestmark = pytest.mark.slow

FORGED = "ERROR signaling.auth.middleware: token of admin accepted"
HOSTILE_NAME = f"cam\n{FORGED}\r\n{FORGED}\u2028{FORGED}\x85{FORGED}\x1b[2K\u202e"
KEY = "sk_" + "K" * 32  # the legacy key whose name is hostile
BOGUS = f"sk_{'B' * 32}\n{FORGED}"
RECORD_START = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) [A-Za-z0-9_.]+: ")


def wrong(token: str) -> str:
    """A play token one character off (a typo, or a guess)."""
    return token[:-1] + ("1" if token.endswith("0") else "0")


def legacy_store(data_dir: Path) -> None:
    """A store from before names were checked, holding a key whose name forges lines."""
    data_dir.mkdir(parents=True)
    (data_dir / "stream-keys.json").write_text(json.dumps([{
        "key_id": "0bad0bad", "key_hash": hash_key(KEY), "created": 1.0, "revoked": None, "owner": "mallory",
        "stream": {"name": HOSTILE_NAME, "source_face": "", "swap": {}, "push": [], "record": None,
                   "face_id": "astronaut", "push_unrestricted": False}}]))


@pytest.fixture
def captured_logs():
    """The root logger writing through both of swapcast's formatters, as `swapcast serve` does."""
    text, lines = io.StringIO(), io.StringIO()
    handlers = [logging.StreamHandler(text), logging.StreamHandler(lines)]
    handlers[0].setFormatter(TextFormatter(TEXT_FORMAT))
    handlers[1].setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    for handler in handlers:
        root.addHandler(handler)
    yield text, lines
    for handler in handlers:
        root.removeHandler(handler)
    root.setLevel(level)


def test_hostile_names_and_keys_never_forge_a_line_nor_leak_a_key(engine, grace_image, tmp_path, captured_logs):
    legacy_store(tmp_path / "data")
    messages = camera_messages(grace_image, 20)

    async def scenario():
        async with node(engine, tmp_path / "data", subject="mallory") as client:
            ingest = client.server.app[NODE_KEY].rtmp_ingest
            port = client.server.app[NODE_KEY].rtmp_server.port
            base = f"rtmp://127.0.0.1:{port}"
            publisher = RtmpPublishClient(f"{base}/live/{KEY}", timeout=10)
            await publisher.connect()
            for message in messages:
                await publisher.send(message)
            await settle(lambda: "0bad0bad" in ingest.streams, 10)
            play_token = ingest.streams["0bad0bad"].play_token
            await publisher.close()
            for url in (f"{base}/live/{BOGUS}", f"{base}/live\n{FORGED}/{BOGUS}", f"{base}/{FORGED}\u2028/x"):
                try:
                    await RtmpPublishClient(url, timeout=5).connect()
                except (RtmpClientError, OSError):
                    pass
            for name in (wrong(play_token), f"{play_token}\n{FORGED}"):
                try:
                    await RtmpPlayClient(f"{base}/live/{name}", timeout=5).connect()
                except (RtmpClientError, OSError):
                    pass
            await client.get("/api/v1/sessions/%0A" + FORGED.replace(" ", "%20"), headers=bearer("mallory"))
            await asyncio.sleep(0.2)
            return play_token

    play_token = run(scenario(), timeout=60)
    text, lines = (stream.getvalue() for stream in captured_logs)
    assert "\\n" + FORGED in text and "publishing from" in text  # the name was logged, escaped on its line
    for line in text.splitlines():
        assert RECORD_START.match(line) or line.startswith("    "), line
    assert not any(line.startswith(FORGED) for line in text.splitlines())
    for secret in (KEY, "sk_" + "B" * 32, play_token, wrong(play_token)):
        assert secret not in text and secret not in lines
    for line in lines.splitlines():  # JSON: one object a line, nothing a line reader splits
        json.loads(line)
        assert len(line.splitlines()) == 1, line
