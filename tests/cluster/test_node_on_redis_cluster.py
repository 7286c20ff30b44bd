"""A node whose cluster.redis_url is a Redis Cluster (``redis+cluster://``, a real 3-master
one): it registers, places sessions and serves the job queue through the cluster client,
one URL for the registry and the queue."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer
from webrtc_harness import bearer, node_config, run

from swapcast.app import NODE_KEY, build_app


def test_a_node_runs_on_a_redis_cluster(engine, tmp_path, redis_cluster_url):
    config = node_config(tmp_path)
    config = config.model_copy(update={"cluster": config.cluster.model_copy(update={
        "redis_url": redis_cluster_url, "node_id": "node-on-cluster"})})

    async def scenario():
        app = build_app(config, engine=engine)
        client = TestClient(TestServer(app, host="127.0.0.1"), headers=bearer("alice"))
        await client.start_server()
        try:
            ready = await client.get("/readyz")
            placed = await client.post("/api/v1/sessions", json={"face_id": "astronaut"})
            session = await placed.json()
            record = await app[NODE_KEY].registry.get_session(session["session_id"])
            jobs = await client.get("/api/v1/jobs")
            nodes = await client.get("/api/v1/nodes", headers=bearer("ops", "admin"))
            return ready.status, placed.status, session, record, jobs.status, await jobs.json(), await nodes.json()
        finally:
            await client.close()

    ready, placed, session, record, jobs, job_list, nodes = run(scenario(), timeout=60)
    assert ready == 200
    assert placed == 201 and session["node_id"] == "node-on-cluster"
    assert record is not None and record.owner == "alice" and record.state == "placed"
    assert jobs == 200 and job_list == {"jobs": []}
    assert [n["id"] for n in nodes] == ["node-on-cluster"]
