"""A real Triton Inference Server for the tests: nvidia-pytriton's ``tritonserver`` binary
from the virtualenv ``scripts/triton-venv.sh`` builds, serving a repository whose models
run their exported ONNX graph with ONNX Runtime through Triton's Python backend (the only
backend that wheel carries). Triton's dynamic batcher hands ``execute`` several requests;
the model stacks them, runs ONNX Runtime once and splits the answer, so Triton's
statistics count the merged batch."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from process_harness import ManagedProcess, http_ok, start_process

from swapcast.local_cluster import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-triton"
SERVER_DIR = VENV / "lib/python3.11/site-packages/pytriton/tritonserver"

PYTHON_BACKEND_MODEL = '''
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """The exported model.onnx on ONNX Runtime (CPU); requests batched by Triton run at once."""

    def initialize(self, args):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def execute(self, requests):
        feeds = {name: [pb_utils.get_input_tensor_by_name(r, name).as_numpy() for r in requests] for name in self.inputs}
        counts = [len(array) for array in feeds[self.inputs[0]]]
        results = self.session.run(None, {name: np.concatenate(arrays) for name, arrays in feeds.items()})
        responses, start = [], 0
        for count in counts:
            tensors = [pb_utils.Tensor(name, result[start:start + count]) for name, result in zip(self.outputs, results)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start += count
        return responses
'''


def ensure_venv() -> None:
    """Build (once; stamped) the server's virtualenv, as scripts/bootstrap does in CI."""
    subprocess.run([str(ROOT / "scripts/triton-venv.sh")], check=True, timeout=600)


def python_backend_repository(exported: Path, target: Path) -> Path:
    """A copy of an exported repository (ONNX models only) served by the Python backend."""
    for folder in sorted(exported.iterdir()):
        config = folder / "config.pbtxt"
        if not config.exists() or 'platform: "onnxruntime_onnx"' not in config.read_text():
            continue
        (target / folder.name / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / "1" / "model.onnx", target / folder.name / "1" / "model.onnx")
        (target / folder.name / "1" / "model.py").write_text(PYTHON_BACKEND_MODEL)
        text = config.read_text().replace('platform: "onnxruntime_onnx"', 'backend: "python"').replace("KIND_GPU", "KIND_CPU")
        (target / folder.name / "config.pbtxt").write_text(text)
    return target


class TritonServer:
    """One ``tritonserver`` on free loopback ports; ``kill``/``start`` for failure tests (a
    restart keeps the ports and appends to the same log)."""

    def __init__(self, repository: Path) -> None:
        self.repository = repository
        self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
        self.managed: ManagedProcess | None = None
        fd, log = tempfile.mkstemp(prefix="swapcast-triton-", suffix=".log")
        os.close(fd)
        self.log = Path(log)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout: float = 60.0) -> TritonServer:
        env = dict(os.environ, PATH=f"{VENV / 'bin'}:{os.environ['PATH']}",
                   LD_LIBRARY_PATH=str(SERVER_DIR.parent.parent / "nvidia_pytriton.libs"))
        command = [str(SERVER_DIR / "bin/tritonserver"), f"--model-repository={self.repository}",
                   f"--backend-directory={SERVER_DIR / 'backends'}", f"--http-port={self.http_port}",
                   f"--grpc-port={self.grpc_port}", f"--metrics-port={self.metrics_port}",
                   "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--allow-metrics=false",
                   "--exit-timeout-secs=2", "--log-verbose=0"]
        # its own process group: signals reach the Python backend's stub processes too
        self.managed = start_process("tritonserver", command, self.log, env=env, own_group=True)
        try:
            self.managed.wait_until(http_ok(f"{self.url}/v2/health/ready"), timeout)
        except AssertionError:
            self.stop()
            raise
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash would; its port is free again once it is reaped."""
        if self.managed is not None:
            self.managed.kill()
        self.managed = None

    def stop(self) -> None:
        """Stop the server for good (its log goes too)."""
        if self.managed is not None:
            self.managed.stop(grace_s=10)
        self.managed = None
        self.log.unlink(missing_ok=True)
