"""RTMPS connections count against a client's bound on unstarted connections from their TCP
accept: a client opening TLS connections that never finish the handshake is capped (the
next one is reset at once) and its stalled handshakes time out, while another client (the
second loopback address) publishes over RTMPS meanwhile. A dual-stack peer's mapped address
and an IPv6 /64 are one client each."""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
import sys
from pathlib import Path

import pytest

from rtmp_testkit import RecordingHandler, run, wait_for

from signaling.tls import server_context
from streamer.rtmp import RtmpServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tls_testkit import STALLED_CLIENT_HELLO, ThrowawayCA, received_until_closed  # noqa: E402


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory):
    ca = ThrowawayCA(tmp_path_factory.mktemp("pki"))
    leaf = ca.issue("127.0.0.1")
    return server_context(leaf.cert, leaf.key), ssl.create_default_context(cafile=str(ca.path))


def test_stalled_rtmps_handshakes_are_capped_and_time_out(tls_pair, caplog):
    server_tls, client_tls = tls_pair
    caplog.set_level(logging.WARNING)

    async def scenario():
        handler = RecordingHandler({"KEY"})
        async with RtmpServer(handler, port=0, tls=server_tls, stall_timeout=1.5, max_pending_per_ip=3) as server:
            stalled = [await asyncio.open_connection("127.0.0.1", server.tls_port) for _ in range(3)]
            for _, writer in stalled:
                writer.write(STALLED_CLIENT_HELLO)
            await asyncio.sleep(0.2)
            held = dict(server._pending_by_ip)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.tls_port)
            writer.write(STALLED_CLIENT_HELLO)
            async with asyncio.timeout(1.0):  # well before the handshake timeout: reset at accept
                refused = await received_until_closed(reader)
            other_reader, other_writer = await asyncio.open_connection(
                "127.0.0.1", server.tls_port, ssl=client_tls, local_addr=("127.0.0.2", 0))
            other_writer.write(bytes([3]) + bytes(1536))  # RTMP C0 + C1 inside TLS: S0 comes back
            other = await asyncio.wait_for(other_reader.read(1), 5)
            other_writer.close()
            async with asyncio.timeout(10):
                cut = [await received_until_closed(r) for r, _ in stalled]
            await wait_for(lambda: "127.0.0.1" not in server._pending_by_ip, 5)
            late_reader, late_writer = await asyncio.open_connection("127.0.0.1", server.tls_port, ssl=client_tls)
            late_writer.write(bytes([3]) + bytes(1536))
            late = await asyncio.wait_for(late_reader.read(1), 5)  # the places are free again
            late_writer.close()
            return held, refused, other, cut, late

    held, refused, other, cut, late = run(scenario(), timeout=30)
    assert held == {"127.0.0.1": 3}
    assert refused == b"" and cut == [b"", b"", b""]
    assert other == late == b"\x03"
    gc.collect()  # a task that died with an exception says so when collected
    assert [r.getMessage() for r in caplog.records if r.name.startswith(("streamer.rtmp", "asyncio"))] == []


def test_a_mapped_peer_and_an_ipv6_subnet_are_one_client_each():
    server = RtmpServer(RecordingHandler(set()), port=0, max_pending_per_ip=2)
    assert server._count_pending("::ffff:192.0.2.7") == "192.0.2.7"
    assert server._count_pending("192.0.2.7") == "192.0.2.7"
    assert server._count_pending("::ffff:192.0.2.7") is None
    assert server._count_pending("2001:db8:5:6::1") == server._count_pending("2001:db8:5:6::2") == "2001:db8:5:6::/64"
    assert server._count_pending("2001:db8:5:6:ffff::9") is None
