"""The Triton deployment files: the compose service and the k8s overlay (one Triton per
GPU host, the node pods on the host pointed at it), checked as data and with
``kubectl kustomize`` (scripts/bootstrap does not install kubectl: test_deploy's rules)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from swapcast.config import load_config

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "configs" / "k8s-triton"


def _overlay_docs() -> list[dict]:
    docs = []
    for name in ("triton.yaml", "node-runner.yaml"):
        docs += [d for d in yaml.safe_load_all((OVERLAY / name).read_text()) if d]
    return docs


def test_compose_triton_serves_the_exported_repository_for_the_gpu_nodes() -> None:
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    triton = services["triton"]
    assert triton["image"].startswith("nvcr.io/nvidia/tritonserver:") and triton["profiles"] == ["gpu"]
    assert any(v["target"] == "/models" and v["read_only"] for v in triton["volumes"])
    assert "--model-repository=/models" in triton["command"]
    node = services["gpu-node1"]["environment"]
    assert node["SWAPCAST_ENGINE__TRITON_URL"] == "http://triton:8000"
    assert "GPU_RUNNER" in node["SWAPCAST_ENGINE__RUNNER"]


def test_k8s_overlay_runs_one_triton_per_gpu_host_and_points_the_nodes_at_it() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _overlay_docs()}
    triton = docs[("DaemonSet", "swapcast-triton")]["spec"]["template"]["spec"]
    container = triton["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert triton["hostNetwork"] and triton["hostIPC"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    node = docs[("Deployment", "swapcast-node")]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in node["containers"][0]["env"]}
    config = load_config(environ=env)
    assert (config.engine.runner, config.engine.triton_url, config.engine.device) == ("triton", "http://127.0.0.1:8000", "cpu")
    assert node["hostIPC"] and node["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] is None


def test_k8s_overlay_builds_where_kubectl_is_installed() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:  # the manifests were checked as data above
        return
    done = subprocess.run([kubectl, "kustomize", str(OVERLAY)], check=False, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    built = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout) if d}
    assert ("DaemonSet", "swapcast-triton") in built
    limits = built[("Deployment", "swapcast-node")]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits
