"""The hand-overs inside a live stream stay bounded whatever the other side does: audio
held for video that never comes, and a push destination that takes nothing."""

from __future__ import annotations

import asyncio

from streamer.live.interleave import AudioDelay
from streamer.live.outputs import Headers, PushOutput
from streamer.rtmp.handler import MediaMessage

AAC_FRAME = MediaMessage("audio", 0, b"\xaf\x01" + b"\x00" * 200)
KEYFRAME = MediaMessage("video", 0, b"\x17\x01\x00\x00\x00" + b"\x00" * 100)


def test_audio_held_for_video_that_never_comes_stays_bounded():
    sent: list[MediaMessage] = []
    delay = AudioDelay(sent.append, max_hold_s=3600.0)  # time alone would hold it all
    for index in range(10_000):  # a flood of audio ahead of any video
        delay.audio(MediaMessage("audio", 1000 + index, AAC_FRAME.payload))
    assert len(delay._held) == AudioDelay.MAX_HELD
    assert [m.timestamp for m in sent] == list(range(1000, 1000 + 10_000 - AudioDelay.MAX_HELD))  # oldest first
    delay.close()  # the stream ended: nothing held, nothing sent any more
    delay.audio(AAC_FRAME)
    assert len(sent) == 10_000 - AudioDelay.MAX_HELD


class StalledDestination:
    """Connects, then never takes a message (a destination whose TCP window stays shut)."""

    async def connect(self) -> None:
        pass

    async def send(self, message: MediaMessage) -> None:
        await asyncio.Event().wait()

    async def close(self) -> None:
        pass


def test_a_push_destination_that_takes_nothing_does_not_grow_its_queue():
    async def scenario() -> tuple[int, int]:
        output = PushOutput("rtmp://example.invalid/live/x", Headers(), lambda url: StalledDestination())
        while not output.connected:
            await asyncio.sleep(0.01)
        output.send(KEYFRAME)
        most = 0
        for index in range(20_000):  # audio is never dropped to a keyframe: only the hard limit holds it
            output.send(MediaMessage("audio", index, AAC_FRAME.payload))
            most = max(most, output._queue.qsize())
        await output.close()
        return most, PushOutput.HARD_LIMIT

    most, limit = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert most <= limit + 1


def test_a_push_destination_is_logged_without_its_stream_key(caplog):
    async def scenario() -> str:
        output = PushOutput("rtmp://ingest.example.invalid/app/live_secret_key", Headers(), lambda url: StalledDestination())
        while not output.connected:
            await asyncio.sleep(0.01)
        await output.close()
        return output.name

    with caplog.at_level("INFO", logger="streamer.live.outputs"):
        name = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert name == "push rtmp://ingest.example.invalid/app/***"
    assert "connected" in caplog.text and "live_secret_key" not in caplog.text
