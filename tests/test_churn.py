"""Many stream lifecycles, and nothing stays behind: after RTMP publishes and plays (ffmpeg
as the publisher), browser WebRTC sessions, WHIP publishes and WHEP viewers, the process's
threads (native ones included: x264's, FFmpeg's) and its memory are back where they were
after a warm-up.

The lifecycles run with the garbage collector off: a finished stream must be freed by
reference counting when it ends, not whenever a full collection happens to find a cycle
(that is how 30 RTMP lifecycles once left 156 codec threads and 700 MB behind)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from media_fixtures import write_test_video
from test_rtmp_ingest import Node, face_file, publish_command, run_process  # noqa: F401  (face_file: a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parent / "webrtc"))  # the node test helpers
from webrtc_harness import answer, camera_offer, client_peer, collect_video, node, viewer_offer  # noqa: E402

from signaling.stream_keys import StreamKeyStore
from streamer.live.heap import release_freed_memory
from streamer.rtmp.client import RtmpPlayClient
from streamer.samples import moving_face_frames

SDP = {"Content-Type": "application/sdp"}
THREAD_MARGIN = 2  # an executor may keep one more idle thread than it had
RSS_MARGIN_MB = 80.0  # allocator arenas and caches; a leaking stream costs tens of MB each


def native_threads() -> Counter[str]:
    """Every thread of the process by its kernel name (Python's and native ones alike)."""
    names: Counter[str] = Counter()
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that just ended
            names[Path(f"/proc/self/task/{task}/comm").read_text().strip()] += 1
    return names


def rss_mb() -> float:
    """Resident memory once cyclic garbage is collected and freed heap given back: what is
    left is what something still holds. (Per-frame cycles, such as mediapipe's results, are
    young garbage the collector frees within frames; they are not what a stream leaves.)"""
    gc.collect()
    release_freed_memory()
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def live_pools() -> dict[ThreadPoolExecutor, int]:
    """The process's thread pools that are not shut down, with their thread counts. A pool
    starts threads as work overlaps, up to its ``max_workers``, and keeps them: the node's
    batchers and the loop's default executor grow so when a later round overlaps more."""
    return {pool: len(pool._threads) for pool in gc.get_objects()  # noqa: SLF001 (the stdlib keeps no public count)
            if issubclass(type(pool), ThreadPoolExecutor) and not pool._shutdown}  # type(): no proxy object asked


async def churn(lifecycle: Callable[[int], Awaitable[int]], warm_up: int, rounds: int) -> dict:
    """Threads and RSS after ``warm_up`` lifecycles (the baseline) and after ``rounds`` more;
    each lifecycle returns the thread count it saw while its streams were live. Threads the
    baseline's own pools started meanwhile (``pool_growth``, bounded by their sizes) are
    reuse, not something a stream left behind; a pool made after the baseline is not."""
    for index in range(warm_up):
        await lifecycle(index)
    await asyncio.sleep(0.5)  # executors shut down with wait=False end their threads a moment later
    baseline_threads = native_threads()
    baseline_pools = live_pools()
    baseline_rss = rss_mb()  # after the threads: it collects garbage
    peak = 0
    for index in range(warm_up, warm_up + rounds):
        peak = max(peak, await lifecycle(index))

    def pool_growth() -> int:
        return sum(len(pool._threads) - count for pool, count in baseline_pools.items())  # noqa: SLF001

    after_threads = native_threads()
    for _ in range(50):  # ... later still on a loaded host: up to 5 s for them to go
        await asyncio.sleep(0.1)
        after_threads = native_threads()
        if sum(after_threads.values()) - pool_growth() <= sum(baseline_threads.values()) + THREAD_MARGIN:
            break
    return {"baseline": baseline_threads, "after": after_threads, "pool_growth": pool_growth(), "peak_threads": peak,
            "baseline_rss": baseline_rss, "rss": rss_mb()}


def assert_back_to_baseline(result: dict) -> None:
    baseline, after = result["baseline"], result["after"]
    assert result["peak_threads"] > sum(baseline.values())  # the streams did run threads of their own
    grown = {name: count - baseline[name] for name, count in after.items() if count > baseline[name]}
    left = sum(after.values()) - result["pool_growth"]
    assert left <= sum(baseline.values()) + THREAD_MARGIN, (
        f"threads left behind: {grown}, of which {result['pool_growth']} started by the baseline's pools")
    assert result["rss"] <= result["baseline_rss"] + RSS_MARGIN_MB, (
        f"RSS {result['baseline_rss']:.0f} -> {result['rss']:.0f} MB")


def test_rtmp_publishes_and_plays_leave_no_thread_or_memory_behind(engine, grace_image, face_file, tmp_path):  # noqa: F811
    clip = tmp_path / "camera.mp4"
    write_test_video(clip, moving_face_frames(grace_image, 40, (320, 240)), fps=20)

    async def scenario() -> dict:
        async with Node(engine, tmp_path / "data", resume_window_s=0.2) as node:
            keys = [node.keys.add(f"cam{n}", face_file) for n in range(3)]

            async def lifecycle(index: int) -> int:
                key, record = keys[index % len(keys)]
                publishers = [asyncio.create_task(run_process(publish_command(clip, node.url(k)), 60)) for k, _ in keys]
                while record.key_id not in node.ingest.streams:
                    await asyncio.sleep(0.05)
                async with RtmpPlayClient(node.url(record.play_token), timeout=10) as viewer:  # a viewer comes and goes
                    await asyncio.wait_for(anext(aiter(viewer.media())), 10)
                    live_threads = sum(native_threads().values())
                assert await asyncio.gather(*publishers) == [0, 0, 0]
                while node.ingest.streams:  # each ends once its resume window is over
                    await asyncio.sleep(0.05)
                return live_threads

            with collector_off():
                return await churn(lifecycle, warm_up=2, rounds=4)

    result = asyncio.run(asyncio.wait_for(scenario(), 400))
    assert_back_to_baseline(result)


def test_webrtc_whip_and_whep_lifecycles_leave_no_thread_or_memory_behind(engine, astronaut_image, tmp_path):
    from streamer.media.images import write_image

    photo = tmp_path / "astronaut.png"
    write_image(photo, astronaut_image)
    key, _ = StreamKeyStore(tmp_path / "data").add("studio", photo)

    async def scenario() -> dict:
        async with node(engine, tmp_path / "data", role="admin") as client:

            async def lifecycle(index: int) -> int:
                # a browser session: camera in, swapped video back, then hung up
                browser = client_peer()
                back = collect_video(browser)
                body = {"sdp": await camera_offer(browser), "type": "offer", "face_id": "astronaut"}
                response = await client.post("/api/v1/sessions", json=body)
                assert response.status == 201, await response.text()
                reply = await response.json()
                await answer(browser, reply["sdp"])
                # a WHIP publisher and a WHEP viewer of it
                publisher = client_peer()
                offer = await camera_offer(publisher, direction="sendonly")
                response = await client.post("/whip", data=offer, headers={**SDP, "Authorization": f"Bearer {key}"})
                assert response.status == 201, await response.text()
                whip = response.headers["Location"]
                await answer(publisher, await response.text())
                viewer = client_peer()
                watched = collect_video(viewer)
                session_id = whip.rsplit("/", 1)[1]
                response = await client.post(f"/whep/{session_id}", data=await viewer_offer(viewer), headers=SDP)
                assert response.status == 201, await response.text()
                whep = response.headers["Location"]
                await answer(viewer, await response.text())
                await back.wait_for(5, timeout=30)
                await watched.wait_for(5, timeout=30)
                live_threads = sum(native_threads().values())

                assert (await client.delete(whep)).status == 204
                assert (await client.delete(whip, headers={"Authorization": f"Bearer {key}"})).status == 204
                assert (await client.delete(f"/api/v1/sessions/{reply['session_id']}")).status == 204
                for collector in (back, watched):
                    await collector.stop()
                for peer in (browser, publisher, viewer):
                    await peer.close()
                for _ in range(200):
                    if not await (await client.get("/api/v1/sessions")).json():
                        break
                    await asyncio.sleep(0.05)
                return live_threads

            with collector_off():
                return await churn(lifecycle, warm_up=1, rounds=3)

    result = asyncio.run(asyncio.wait_for(scenario(), 400))
    assert_back_to_baseline(result)

