"""A real Triton server (nvidia-pytriton's tritonserver, Python backend) for the session,
serving the repository ``swapcast models export --triton`` writes for the built-in swapper
and the inswapper twin."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_twins import make_inswapper
from triton_testkit import TritonServer, ensure_venv, python_backend_repository

from gpu.models.triton_repository import BatchingPlan, swap_model, write_repository

# a long queue delay so that concurrent clients' requests reliably meet in one batch
PLAN = BatchingPlan(max_batch=8, max_queue_delay_ms=40.0, kind="cpu")


@pytest.fixture(scope="session")
def triton_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user models folder with the inswapper twin (batch pinned to 1, as the real file)."""
    folder = tmp_path_factory.mktemp("triton-user-models")
    make_inswapper(folder / "inswapper_128.onnx")
    return folder


@pytest.fixture(scope="session")
def triton_server(tmp_path_factory: pytest.TempPathFactory, triton_models: Path):
    ensure_venv()
    exported = tmp_path_factory.mktemp("triton-export")
    write_repository(exported, [swap_model("mesh3d", None), swap_model("inswapper", triton_models)], PLAN)
    served = python_backend_repository(exported, tmp_path_factory.mktemp("triton-served"))
    server = TritonServer(served).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def triton_engine(triton_server):
    """A node's face engine on runner triton (the built-in mesh3d swapper on the server)."""
    from gpu.engine import EngineSettings, FaceEngine

    engine = FaceEngine(EngineSettings(swapper="mesh3d", runner="triton", triton_url=triton_server.url,
                                       triton_timeout_s=5.0, runner_threads=1))
    yield engine
    engine.close()
