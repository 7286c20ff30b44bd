"""A WHEP viewer deleted right after it was created leaves nothing behind: no task of the
server's peer connection ends with an exception nobody retrieves (aiortc starts ICE and
DTLS in a task it does not keep), and nothing is logged as an error."""

from __future__ import annotations

import asyncio
import gc
import logging

from webrtc_harness import answer, camera_offer, client_peer, node, run, viewer_offer

from streamer.webrtc.routes import SESSIONS_KEY

SDP = {"Content-Type": "application/sdp"}
VIEWERS = 48


class TaskOwners:
    """Which object each task's coroutine is a method of, so a task exception reported by
    the event loop is told apart: the server's peer connections, or the test's own peers."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.owners: dict[int, str] = {}  # by the task's id: holding tasks would keep them from being collected
        self.problems: list[str] = []
        loop.set_task_factory(self._task)
        loop.set_exception_handler(self._report)

    def _task(self, loop, coroutine, **kwargs) -> asyncio.Task:
        task = asyncio.Task(coroutine, loop=loop, **kwargs)
        frame = getattr(coroutine, "cr_frame", None)
        if frame is not None and "self" in frame.f_locals:
            owner = frame.f_locals["self"]
            self.owners[id(task)] = f"{type(owner).__name__} {id(owner)}"
        return task

    def _report(self, loop, context: dict) -> None:
        owner = self.owners.get(id(context.get("future")), "?")
        self.problems.append(f"{context.get('message')}: {context.get('exception')!r} ({owner})")


def ice_completed(pc) -> asyncio.Future:
    """Done when ``pc``'s ICE is up, the moment aiortc goes on to start DTLS."""
    done = asyncio.get_running_loop().create_future()

    @pc.on("iceconnectionstatechange")
    def changed() -> None:
        if pc.iceConnectionState == "completed" and not done.done():
            done.set_result(None)

    return done


def test_a_whep_viewer_deleted_at_once_leaves_no_unretrieved_task_exception(engine, tmp_path, caplog):
    async def scenario():
        tasks = TaskOwners(asyncio.get_running_loop())
        own_peers: set[int] = set()
        async with node(engine, tmp_path / "data") as client:
            response = await client.post("/api/v1/keys", json={"name": "cam", "face_id": "astronaut"})
            key = (await response.json())["key"]
            publisher = client_peer()
            response = await client.post("/whip", data=await camera_offer(publisher, direction="sendonly"),
                                         headers={**SDP, "Authorization": f"Bearer {key}"})
            assert response.status == 201, await response.text()
            await answer(publisher, await response.text())
            session_id = response.headers["Location"].rsplit("/", 1)[1]
            manager = client.app[SESSIONS_KEY]
            deleted = []
            for attempt in range(VIEWERS):
                viewer = client_peer()
                own_peers.add(id(viewer))
                response = await client.post(f"/whep/{session_id}", data=await viewer_offer(viewer, audio=True),
                                             headers=SDP)
                assert response.status == 201, await response.text()
                location = response.headers["Location"]
                ice_up = ice_completed(manager.get(session_id).viewers[location.rsplit("/", 1)[1]].pc)
                await answer(viewer, await response.text())  # the viewer starts connecting: ICE checks begin
                if attempt % 4:  # at once, or (most often) the moment ICE is up and DTLS starts
                    await asyncio.wait_for(ice_up, 10)
                deleted.append((await client.delete(location)).status)
                await viewer.close()
            await asyncio.sleep(1.0)  # the cut connections' tasks finish
            await publisher.close()
        gc.collect()  # an unretrieved task exception is reported when its task is collected
        await asyncio.sleep(0)
        server_side = [p for p in tasks.problems if not any(str(peer) in p for peer in own_peers)]
        return deleted, server_side

    with caplog.at_level(logging.WARNING):
        deleted, problems = run(scenario(), timeout=120)
    assert deleted == [204] * VIEWERS
    assert problems == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
