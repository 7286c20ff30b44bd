"""The events WebSocket says when the people a session sees change (map faces): someone new,
someone leaving the picture, someone given another face; not when only numbers move."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from signaling.auth import Principal
from signaling.auth.middleware import PRINCIPAL_KEY
from signaling.events import EVENTS_PATH, add_event_routes


def person(person_id: str, on_screen: bool = True, wears: str = "source", frames: int = 1) -> dict:
    return {"id": person_id, "on_screen": on_screen, "wears": wears, "frames": frames}


def test_people_events_follow_who_is_seen_and_what_they_wear():
    timeline = [
        [],
        [person("person-1")],
        [person("person-1", frames=30)],  # only a count moved: no event
        [person("person-1"), person("person-2")],
        [person("person-1", wears="grace_hopper"), person("person-2", on_screen=False)],
    ]
    step = 0

    async def list_sessions(request: web.Request) -> list[dict]:
        nonlocal step
        people = timeline[min(step, len(timeline) - 1)]
        step += 1
        return [{"id": "s1", "owner": "alice", "people": people}]

    @web.middleware
    async def alice(request: web.Request, handler):
        request[PRINCIPAL_KEY] = Principal("alice", "user")
        return await handler(request)

    async def scenario() -> list[dict]:
        app = web.Application(middlewares=[alice])
        add_event_routes(app, list_sessions, None, interval_s=0.05)
        async with TestClient(TestServer(app)) as client:
            ws = await client.ws_connect(EVENTS_PATH)
            events = []
            while step < len(timeline) + 1:
                message = await ws.receive_json(timeout=5)
                if message["type"] == "people":
                    events.append(message)
            await ws.close()
            await asyncio.sleep(0)
            return events

    events = asyncio.run(scenario())
    assert [e["session_id"] for e in events] == ["s1"] * 3
    assert [[(p["id"], p["on_screen"], p["wears"]) for p in e["people"]] for e in events] == [
        [("person-1", True, "source")],
        [("person-1", True, "source"), ("person-2", True, "source")],
        [("person-1", True, "grace_hopper"), ("person-2", False, "source")],
    ]
