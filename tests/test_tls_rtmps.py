"""RTMPS end to end with real clients on 127.0.0.1, through the node as ``swapcast serve``
wires it (``build_node``): ffmpeg publishes to rtmps:// and plays the swapped stream back
over rtmps://, and the swapped stream is pushed to an
rtmps:// destination whose certificate the node verifies against ``push.ca_file``. The
destination is ``ffmpeg -listen 1`` behind socat's TLS listener (ffmpeg cannot listen for
rtmps itself: "rtmp_listen not available for rtmps")."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from media_fixtures import write_test_video
from tls_testkit import ThrowawayCA, free_port

from streamer.media.images import write_image
from streamer.rtmp.client import RtmpClientError, RtmpPublishClient
from streamer.samples import moving_face_frames
from swapcast.app import build_node
from swapcast.config import load_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
FPS = 25


async def _run(command: list[str], timeout: float) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(*command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.PIPE)
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return process.returncode, stderr.decode(errors="replace")


@contextlib.asynccontextmanager
async def tls_terminator(port: int, certificate, target_port: int):
    """socat: TLS on ``port`` (``certificate``), plain TCP to ``target_port``."""
    process = await asyncio.create_subprocess_exec(
        "socat", f"OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,verify=0,cert={certificate.cert},"
                 f"key={certificate.key}", f"TCP:127.0.0.1:{target_port}",
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            await asyncio.sleep(0.05)
        yield
    finally:
        process.terminate()
        await process.wait()


def _streams(path: Path) -> dict:
    result = subprocess.run(["ffprobe", "-v", "error", "-show_streams", "-of", "json", str(path)],
                            capture_output=True, text=True, timeout=30, check=True)
    return {s["codec_type"]: s for s in json.loads(result.stdout)["streams"]}


def test_ffmpeg_publishes_over_rtmps_and_the_swap_is_pushed_to_an_rtmps_destination(engine, grace_image,
                                                                                     astronaut_image, tmp_path):
    ca = ThrowawayCA(tmp_path / "pki")
    node_cert, destination_cert = ca.issue("node"), ca.issue("destination")
    clip = tmp_path / "camera.mp4"
    write_test_video(clip, moving_face_frames(grace_image, 2 * FPS + 13, (480, 360)), fps=FPS)
    face = tmp_path / "astronaut.png"
    write_image(face, astronaut_image)
    pushed, played = tmp_path / "pushed.flv", tmp_path / "played.flv"
    tls_destination, plain_destination = free_port(), free_port()
    config = load_config(environ={}, overrides={
        "server": {"data_dir": str(tmp_path / "data")},
        "rtmp": {"port": 0, "tls_port": 0},
        "tls": {"cert_file": str(node_cert.cert), "key_file": str(node_cert.key)},
        "push": {"ca_file": str(ca.path)},
        "live": {"push_retry_initial_s": 0.2, "push_retry_max_s": 1.0},
    })

    async def scenario():
        node = build_node(config, engine=engine)
        await node.startup()
        try:
            async with tls_terminator(tls_destination, destination_cert, plain_destination):
                # a destination the node does not trust is refused, saying why
                with pytest.raises(RtmpClientError, match="certificate not trusted"):
                    await RtmpPublishClient(f"rtmps://127.0.0.1:{tls_destination}/live/out", timeout=5).connect()

                key, record = node.keys.add("cam", face, push=(f"rtmps://127.0.0.1:{tls_destination}/live/out",),
                                            push_unrestricted=True)
                listener = asyncio.create_task(_run(
                    ["ffmpeg", "-hide_banner", "-loglevel", "error", "-listen", "1", "-timeout", "30",
                     "-i", f"rtmp://127.0.0.1:{plain_destination}/live/out", "-t", "1.5", "-c", "copy", "-y",
                     str(pushed)], 60))
                await asyncio.sleep(0.3)
                # a client speaking plain RTMP to the RTMPS port fails its handshake, alone
                _, plain = await asyncio.open_connection("127.0.0.1", node.rtmp_server.tls_port)
                plain.write(b"\x03" + bytes(1536))
                publish_url = f"rtmps://127.0.0.1:{node.rtmp_server.tls_port}/live/{key}"
                publishing = asyncio.create_task(_run(
                    ["ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-i", str(clip), "-c:v", "libx264",
                     "-preset", "ultrafast", "-tune", "zerolatency", "-g", str(FPS), "-c:a", "aac",
                     "-f", "flv", publish_url], 60))
                for _ in range(100):  # live once the node made the stream
                    if record.key_id in node.rtmp_ingest.streams or publishing.done():
                        break
                    await asyncio.sleep(0.05)
                # a player over rtmps:// too, with the key's play token
                viewing = asyncio.create_task(_run(
                    ["ffmpeg", "-hide_banner", "-loglevel", "error", "-i",
                     f"rtmps://127.0.0.1:{node.rtmp_server.tls_port}/live/{record.play_token}",
                     "-c", "copy", "-y", str(played)], 60))
                publisher = await publishing
                assert publisher[0] == 0, publisher[1]
                plain.close()
                stream = node.rtmp_ingest.streams.get(record.key_id)
                info = stream.info() if stream is not None else None
                await node.shutdown()  # push and play end now, not after the publisher's resume window
                listened, viewed = await listener, await viewing
                assert listened[0] == 0, listened[1]
                assert viewed[0] == 0, viewed[1]
                return info
        finally:
            await node.shutdown()
            await node.cleanup()

    info = asyncio.run(scenario())
    print("stream info:", info, file=sys.stderr)
    streams = _streams(pushed)
    assert set(streams) == {"video", "audio"}, streams
    assert streams["video"]["codec_name"] == "h264" and (streams["video"]["width"], streams["video"]["height"]) == (480, 360)
    assert streams["audio"]["codec_name"] == "aac"
    assert "video" in _streams(played)
    assert info is not None and info["stats"]["frames_out"] > 0, info
    assert info["push"][0]["url"].startswith("rtmps://127.0.0.1:"), info["push"]
