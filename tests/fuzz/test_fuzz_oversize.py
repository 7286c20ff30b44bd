"""The fuzzer's oversize layer (a message header announcing a huge video, audio or command
message; partial messages on many chunk streams) against a real RTMP server process on
127.0.0.1, beside a well-behaved publisher with an access unit at the video cap: each way
is refused with a reason, the attacker closed, the server's RSS within the bound and the
publisher beside it going on; and each is caught where the server's caps are lifted, so the
layer can tell."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamer.rtmp import messages as msg
from swapcast.benchmarks import proc
from swapcast.benchmarks.fuzz.oversize import ANNOUNCED_TYPES, RSS_BOUND_MB, Attack, RtmpOversizeLayer
from swapcast.benchmarks.fuzz.rtmp import Recording, record
from swapcast.local_cluster import free_port

# The server process: AcceptAll on the given port, INFO log (the closing lines) to a file;
# "unbounded" lifts the per-type caps and the bound on partial messages.
SERVER = """
import asyncio, logging, sys
from streamer.rtmp import RtmpServer, messages
from streamer.rtmp.chunk import ChunkReader
from swapcast.benchmarks.fuzz.rtmp import AcceptAll

port, log_path, unbounded = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "unbounded"
logging.basicConfig(filename=log_path, level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
if unbounded:
    messages.max_payload_bytes = lambda type_id: 0xFFFFFF
    messages.MAX_COMMAND_BYTES = 1 << 40
    reader_init = ChunkReader.__init__
    def lifted(self, **kwargs):
        reader_init(self, **kwargs)
        self.max_message_size, self.max_partial_bytes = 0xFFFFFF, 1 << 40
    ChunkReader.__init__ = lifted

async def main():
    async with RtmpServer(AcceptAll(), host="127.0.0.1", port=port, stall_timeout=10):
        await asyncio.Event().wait()

asyncio.run(main())
"""


@dataclass
class _ServerProcess:
    rtmp_port: int
    log_path: Path
    process: subprocess.Popen

    def rss_mb(self) -> float:
        return proc.rss_mb(self.process.pid)


@dataclass
class _Keys:
    well_behaved_key: str = "GOOD"
    attacker_key: str = "ATTACKER"


@pytest.fixture(scope="module")
def recording() -> Recording:
    made = asyncio.run(record("camera"))
    assert made is not None, "ffmpeg could not record a publish"
    return made


def _serve(tmp_path: Path, mode: str) -> _ServerProcess:
    port, log_path = free_port(), tmp_path / "server.log"
    log_path.touch()
    process = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(log_path), mode],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited: {process.stderr.read().decode(errors='replace')[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return _ServerProcess(port, log_path, process)
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError("the server did not listen within 20 s")


def _case(tmp_path: Path, recording: Recording, attack: Attack, mode: str):
    server = _serve(tmp_path, mode)
    try:
        async def scenario():
            return await RtmpOversizeLayer(server, _Keys(), recording).run(attack)

        return asyncio.run(scenario()), server.log_path.read_text()
    finally:
        server.process.kill()
        server.process.wait(timeout=10)


def _rss_growth(detail: str) -> float:
    return float(detail.split("RSS +")[1].split(" MB")[0])


HEADER_ONLY = [Attack(way, 0xFFFFFF, in_full=False) for way in ("video", "audio", "command")]
IN_FULL = [Attack(way, length) for way, type_id in ANNOUNCED_TYPES.items()
           for length in (msg.max_payload_bytes(type_id) + 1, 0xFFFFFF)]


@pytest.mark.parametrize("attack", HEADER_ONLY, ids=lambda attack: attack.label)
def test_a_header_announcing_an_oversized_message_is_refused_with_a_reason_on_the_wire(tmp_path, recording, attack):
    outcome, log = _case(tmp_path, recording, attack, "bounded")
    assert (outcome.label, outcome.status, outcome.problem) == (attack.label, "refused", None), outcome
    type_id = ANNOUNCED_TYPES[attack.way]
    limit = msg.max_payload_bytes(type_id)
    assert (f"refused, NetStream.Publish.Failed: {msg.message_name(type_id)} of {0xFFFFFF} bytes (at most {limit})"
            in outcome.detail), outcome.detail
    assert "the well-behaved publisher went on" in outcome.detail
    assert _rss_growth(outcome.detail) <= RSS_BOUND_MB
    assert "Traceback" not in log


@pytest.mark.parametrize("attack", [*IN_FULL, Attack("partials")],
                         ids=lambda attack: f"{attack.label}/{attack.length}" if attack.length else attack.label)
def test_an_oversized_message_sent_in_full_is_refused_with_a_reason_on_the_wire_and_the_publisher_beside_goes_on(
        tmp_path, recording, attack):
    """Sent in full, 16 MiB too, the reason reaches the attacker though it goes on sending:
    the node reads and drops the rest after its notice instead of resetting the connection.
    The partials bound says why on the wire too."""
    outcome, log = _case(tmp_path, recording, attack, "bounded")
    assert (outcome.label, outcome.status, outcome.problem) == (attack.label, "refused", None), outcome
    if attack.way == "partials":
        limit = 2 * msg.MAX_VIDEO_BYTES
        assert (f"refused, NetStream.Publish.Failed: partial messages of {limit + 65536} bytes on all chunk streams "
                f"together (at most {limit})") in outcome.detail, outcome.detail
    else:
        type_id = ANNOUNCED_TYPES[attack.way]
        assert (f"refused, NetStream.Publish.Failed: {msg.message_name(type_id)} of {attack.length} bytes "
                f"(at most {msg.max_payload_bytes(type_id)})") in outcome.detail, outcome.detail
    assert "the well-behaved publisher went on" in outcome.detail
    assert _rss_growth(outcome.detail) <= RSS_BOUND_MB
    assert "Traceback" not in log


UNBOUNDED = [Attack("video", 0xFFFFFF), Attack("audio", msg.MAX_AUDIO_BYTES + 1, in_full=False),
             Attack("command", msg.MAX_COMMAND_BYTES + 1), Attack("partials")]


@pytest.mark.parametrize("attack", UNBOUNDED, ids=lambda attack: attack.label)
def test_without_the_caps_the_layer_reports_what_the_server_took(tmp_path, recording, attack):
    outcome, _ = _case(tmp_path, recording, attack, "unbounded")
    assert outcome.problem is not None, outcome
    assert outcome.reproducer == attack.announced.encode()
