"""The deployment files: Dockerfile (+ .dockerignore), docker-compose.yml, configs/k8s/.

No Docker engine or Kubernetes API server runs here, so these tests check what can be
checked without one: the structure of every manifest, that they agree with each other
(labels, names, ports, volumes), that every `swapcast` command line uses a real
sub-command with real flags, and that the configuration each container ends up with loads
with ``swapcast.config.load_config``. Where the tools are installed, ``docker compose config``
and ``kubectl kustomize`` check the files too; where they are not, the test still asserts
its own checks (never a skip: under CI=true a skip fails).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from swapcast.config import CONFIG_ENV, ENV_PREFIX, Config, load_config

REPO = Path(__file__).resolve().parent.parent
K8S = REPO / "configs" / "k8s"
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
NAMESPACE = "swapcast"

# The command lines the processes are started with (issue 6). Flags that take no value:
VALUELESS_FLAGS = {"--fp16"}
CONTRACT_FLAGS = {
    "serve": {"--redis", "--advertise", "--node-id", "--host", "--port", "--rtmp-port", "--models", "--swapper", "--fp16"},
    "gateway": {"--redis", "--host", "--port", "--rtmp-port"},
    "worker": {"--redis"},
}
# Flags the cluster work adds to an existing sub-command: until the parser has any of them
# only the contract is checked; from then on the parser must have all that are used.
CLUSTER_FLAGS = {"serve": {"--redis", "--advertise"}}

API_VERSIONS = {
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Service": "v1",
    "PersistentVolumeClaim": "v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "HorizontalPodAutoscaler": "autoscaling/v2",
    "PodDisruptionBudget": "policy/v1",
}
WORKLOADS = {"Deployment", "StatefulSet"}
# The container fields these manifests may use (a stand-in for the schema where no validator is installed)
CONTAINER_FIELDS = {
    "name", "image", "imagePullPolicy", "command", "args", "env", "envFrom", "ports", "resources",
    "livenessProbe", "readinessProbe", "startupProbe", "lifecycle", "securityContext", "volumeMounts",
    "workingDir", "terminationMessagePolicy",
}
# Sample values for the downward API, as the kubelet would fill them in.
FIELD_SAMPLES = {"status.podIP": "10.0.0.7", "status.hostIP": "10.0.0.7", "metadata.name": "swapcast-node-7d9c-x2k4q"}
VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


# --------------------------------------------------------------------------- loading


@cache
def k8s_files() -> tuple[Path, ...]:
    return tuple(sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"))


@cache
def k8s_docs() -> tuple[dict, ...]:
    docs = []
    for path in k8s_files():
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                assert isinstance(doc, dict), f"{path.name}: a document is not a mapping"
                docs.append({**doc, "_file": path.name})
    return tuple(docs)


def k8s(kind: str, name: str | None = None) -> list[dict]:
    found = [d for d in k8s_docs() if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    assert name is None or len(found) == 1, f"expected one {kind} {name!r}, found {len(found)}"
    return found


def workloads() -> list[dict]:
    return [d for d in k8s_docs() if d["kind"] in WORKLOADS]


def containers(workload: dict) -> list[dict]:
    return workload["spec"]["template"]["spec"]["containers"]


def node_deployment() -> dict:
    return k8s("Deployment", "swapcast-node")[0]


_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?(-|\?)([^}]*))?\}")
SECRET_SAMPLE = "sample-secret-" + "x" * 32  # what an operator puts in the Secret / SWAPCAST_JWT_SECRET


def _interpolate(value: Any) -> Any:
    """Compose's ``${VAR:-default}`` with an empty environment (what `config` would print)."""
    if isinstance(value, str):
        # ${VAR:-default} -> default; ${VAR:?message} (required) -> a sample value
        return _INTERPOLATION.sub(lambda m: SECRET_SAMPLE if m.group(2) == "?" else (m.group(3) or ""),
                                  value).replace("$$", "$")
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    return value


@cache
def compose() -> dict:
    raw = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))  # resolves anchors and << merges
    return _interpolate(raw)


def services() -> dict[str, dict]:
    return compose()["services"]


def compose_env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def is_swapcast_image(image: str) -> bool:
    return image.rsplit("/", 1)[-1].split(":")[0] == "swapcast"


# --------------------------------------------------------------------------- Dockerfile


@cache
def dockerfile_instructions() -> tuple[tuple[str, str], ...]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    result, pending = [], ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and (pending or not stripped.startswith("# syntax")):
            continue
        if not stripped and not pending:
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        if full and not full.startswith("#"):
            keyword, _, rest = full.partition(" ")
            result.append((keyword.upper(), rest.strip()))
    return tuple(result)


@cache
def dockerfile_stages() -> dict[str, dict]:
    """Stage name -> {base, parent, env, instructions}; env includes inherited ENV."""
    global_args: dict[str, str] = {}
    stages: dict[str, dict] = {}
    current: dict | None = None
    for keyword, rest in dockerfile_instructions():
        if keyword == "ARG" and current is None:
            name, _, default = rest.partition("=")
            global_args[name] = default
        elif keyword == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"#{len(stages)}"
            parent = stages.get(base)
            current = {
                "name": name,
                "base": parent["base"] if parent else base,
                "parent": base if parent else None,
                "env": dict(parent["env"]) if parent else {},
                "instructions": [],
            }
            stages[name] = current
        elif current is not None:
            current["instructions"].append((keyword, rest))
            if keyword == "ENV":
                for word in shlex.split(rest):
                    key, _, value = word.partition("=")
                    current["env"][key] = value
    return stages


def stage_chain(name: str) -> list[dict]:
    """The stage and its ancestors, nearest first."""
    chain, stage = [], dockerfile_stages()[name]
    while stage is not None:
        chain.append(stage)
        stage = dockerfile_stages().get(stage["parent"]) if stage["parent"] else None
    return chain


def image_env(image: str) -> dict[str, str]:
    """The ENV of the Dockerfile target an image name stands for (tags ending in gpu: gpu)."""
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    return dict(dockerfile_stages()["gpu" if tag.endswith("gpu") else "cpu"]["env"])


# --------------------------------------------------------------------------- CLI


@cache
def cli_subcommands() -> dict[str, set[str]]:
    """Sub-command -> its option strings, from the real parser (swapcast.cli.build_parser)."""
    from swapcast.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: set(p._option_string_actions) for name, p in sub.choices.items()}


def split_flags(args: list[str]) -> dict[str, str | None]:
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        token = args[i]
        assert token.startswith("-"), f"unexpected positional argument {token!r} in {args}"
        name, eq, inline = token.partition("=")
        assert name not in flags, f"{name} given twice in {args}"
        if name in VALUELESS_FLAGS:
            flags[name] = None
            i += 1
        elif eq:
            flags[name] = inline
            i += 1
        else:
            assert i + 1 < len(args), f"{name} has no value in {args}"
            flags[name] = args[i + 1]
            i += 2
    return flags


def check_command_line(argv: list[str], where: str) -> tuple[str, dict[str, str | None]]:
    """``argv`` = [sub-command, flags...] with variables already expanded."""
    assert argv, f"{where}: no command (the image's default is --help)"
    command, args = argv[0], [str(a) for a in argv[1:]]
    assert command in CONTRACT_FLAGS, f"{where}: {command!r} is not a swapcast sub-command of the deployment"
    flags = split_flags(args)
    unknown = set(flags) - CONTRACT_FLAGS[command]
    assert not unknown, f"{where}: swapcast {command} has no flags {sorted(unknown)}"

    for name in ("--port", "--rtmp-port"):
        if name in flags:
            assert flags[name].isdigit() and 0 < int(flags[name]) < 65536, f"{where}: {name} {flags[name]!r}"
    if "--redis" in flags:
        assert re.fullmatch(r"rediss?://[^/\s]+(/\d+)?", flags["--redis"]), f"{where}: --redis {flags['--redis']!r}"
    if "--advertise" in flags:
        host, _, port = flags["--advertise"].rpartition(":")
        assert host and port == flags.get("--port", "8080"), f"{where}: --advertise {flags['--advertise']!r} != its --port"

    parser_flags = cli_subcommands().get(command)
    if parser_flags is not None:
        pending = CLUSTER_FLAGS.get(command, set())
        grace = pending if not (pending & parser_flags) else set()
        missing = set(flags) - parser_flags - grace
        assert not missing, f"{where}: the parser's `swapcast {command}` has no {sorted(missing)}"
        if set(flags) <= parser_flags:
            from swapcast.cli import build_parser

            try:
                build_parser().parse_args([command, *args])
            except SystemExit as exc:  # argparse's way of refusing
                pytest.fail(f"{where}: swapcast {' '.join([command, *args])} is refused by the parser ({exc})")
    return command, flags


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command, args and env values."""
    return VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), value)


def k8s_container_env(container: dict) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        ref = source["configMapRef"]["name"]
        env.update({k: str(v) for k, v in k8s("ConfigMap", ref)[0]["data"].items()})
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = expand(str(item["value"]), env)
        elif "secretKeyRef" in item["valueFrom"]:
            ref = item["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) in {("swapcast-auth", "jwt-secret"), ("swapcast-turn", "shared-secret")}, (
                f"{container['name']}: unknown secret {ref}")
            env[item["name"]] = SECRET_SAMPLE
        else:
            field = item["valueFrom"]["fieldRef"]["fieldPath"]
            assert field in FIELD_SAMPLES, f"{container['name']}: unexpected fieldRef {field}"
            env[item["name"]] = FIELD_SAMPLES[field]
    return env


def swapcast_k8s_containers() -> Iterator[tuple[dict, dict]]:
    for workload in workloads():
        for container in containers(workload):
            if is_swapcast_image(container["image"]):
                yield workload, container


def swapcast_compose_services() -> Iterator[tuple[str, dict]]:
    for name, service in services().items():
        if is_swapcast_image(service.get("image", "")) or "build" in service:
            yield name, service


def assert_env_names_are_config_keys(names, where: str) -> None:
    for name in names:
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        keys = name[len(ENV_PREFIX) :].lower().split("__")
        assert len(keys) == 2, f"{where}: {name} is not SWAPCAST_<SECTION>__<KEY>"
        section, key = keys
        assert section in Config.model_fields, f"{where}: {name}: no config section {section!r}"
        section_model = Config.model_fields[section].annotation
        assert key in section_model.model_fields, f"{where}: {name}: no key {key!r} in section {section!r}"


# --------------------------------------------------------------------------- Kubernetes


def test_every_k8s_document_is_well_formed():
    assert {p.name for p in k8s_files()} >= {"namespace.yaml", "node.yaml", "gateway.yaml", "redis.yaml"}
    seen = set()
    for doc in k8s_docs():
        where = f"{doc['_file']}: {doc.get('kind')}"
        assert doc.get("apiVersion") and doc.get("kind"), f"{where}: apiVersion and kind are required"
        assert doc["kind"] in API_VERSIONS, f"{where}: unexpected kind"
        assert doc["apiVersion"] == API_VERSIONS[doc["kind"]], f"{where}: apiVersion {doc['apiVersion']}"
        metadata = doc.get("metadata") or {}
        assert metadata.get("name"), f"{where}: metadata.name is required"
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", metadata["name"]), f"{where}: bad name {metadata['name']}"
        if doc["kind"] != "Namespace":
            assert metadata.get("namespace") == NAMESPACE, f"{where} {metadata['name']}: namespace must be {NAMESPACE}"
        key = (doc["kind"], metadata["name"])
        assert key not in seen, f"{where}: {key} defined twice"
        seen.add(key)
    assert ("Namespace", NAMESPACE) in seen


def test_kustomization_lists_every_manifest_and_builds():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))
    assert kustomization["kind"] == "Kustomization"
    assert sorted(kustomization["resources"]) == sorted(p.name for p in k8s_files())
    kubectl = shutil.which("kubectl")
    if kubectl:  # kubectl's built-in kustomize runs offline: no API server needed
        done = subprocess.run([kubectl, "kustomize", str(K8S)], check=False, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        built = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(done.stdout) if d}
        assert built == {(d["kind"], d["metadata"]["name"]) for d in k8s_docs()}


def _run_tool(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60, cwd=REPO)


def test_k8s_manifests_match_the_kubernetes_schemas_where_a_validator_is_installed():
    """kubernetes-validate (PyPI; offline, bundled OpenAPI schemas) in strict mode rejects
    unknown fields and wrong types; it is not a project dependency, so this runs where
    someone installed it. The structural checks in this file run everywhere."""
    validator = shutil.which("kubernetes-validate")
    if validator:
        done = _run_tool([validator, "--strict", "--quiet", *map(str, k8s_files())])
        assert done.returncode == 0, done.stdout + done.stderr
    for workload in workloads():  # a cheap stand-in for the schema: the fields we use
        for container in containers(workload):
            assert set(container) <= CONTAINER_FIELDS, set(container) - CONTAINER_FIELDS


def test_workloads_select_their_own_pods_and_run_unprivileged():
    assert {d["metadata"]["name"] for d in workloads()} >= {"swapcast-node", "swapcast-gateway", "swapcast-worker", "redis"}
    for workload in workloads():
        where = f"{workload['kind']} {workload['metadata']['name']}"
        selector = workload["spec"]["selector"]["matchLabels"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selector and selector.items() <= labels.items(), f"{where}: selector does not match its pod labels"
        pod = workload["spec"]["template"]["spec"]
        assert pod.get("securityContext", {}).get("runAsNonRoot") is True, f"{where}: runAsNonRoot"
        for container in pod["containers"]:
            assert container.get("image"), f"{where}: container {container['name']} has no image"
            assert container.get("securityContext", {}).get("allowPrivilegeEscalation") is False, where
            assert "memory" in container.get("resources", {}).get("limits", {}), f"{where}: memory limit"


def _resolve_port(container: dict, port: int | str) -> int:
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    assert port in named, f"{container['name']}: no container port named {port!r}"
    return named[port]


def test_node_deployment():
    node = node_deployment()
    spec, pod = node["spec"], node["spec"]["template"]["spec"]
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert spec["strategy"]["rollingUpdate"]["maxSurge"] == 1
    # WebRTC media: UDP on ephemeral ports straight to the node -> the host's network
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"

    (container,) = pod["containers"]
    assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    _, flags = check_command_line([expand(a, k8s_container_env(container)) for a in container["args"]], "node")
    port = int(flags["--port"])
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        assert container[probe]["httpGet"]["path"] == path, probe
        assert _resolve_port(container, container[probe]["httpGet"]["port"]) == port, probe
    assert {p["containerPort"] for p in container["ports"]} == {port, int(flags["--rtmp-port"])}
    for p in container["ports"]:  # with hostNetwork a hostPort must equal its containerPort
        assert p.get("hostPort", p["containerPort"]) == p["containerPort"]

    # drain: preStop asks the node to drain and waits for its sessions (at most
    # DRAIN_TIMEOUT_S), then SIGTERM; the grace period covers both
    env = k8s_container_env(container)
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[:2] == ["python", "-c"]
    script = pre_stop[2]
    compile(script, "preStop", "exec")  # valid Python
    assert f"127.0.0.1:{port}/api/v1" in script and "/nodes/self/drain" in script and "/sessions" in script
    assert pod["terminationGracePeriodSeconds"] >= float(env["DRAIN_TIMEOUT_S"]) + 20
    assert re.search(r"/api/v1/nodes/.*drain", (REPO / "swapcast" / "app.py").read_text()), "drain endpoint moved"

    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    models = mounts["/models"]
    assert models.get("readOnly") is True, "the model volume is mounted read-only"
    claim = volumes[models["name"]]["persistentVolumeClaim"]
    assert claim.get("readOnly") is True
    assert k8s("PersistentVolumeClaim", claim["claimName"])[0]["spec"]["accessModes"] == ["ReadOnlyMany"]
    engines = volumes[mounts["/engines"]["name"]]["persistentVolumeClaim"]
    assert "ReadWriteMany" in k8s("PersistentVolumeClaim", engines["claimName"])[0]["spec"]["accessModes"]
    assert not mounts["/engines"].get("readOnly")


def _pre_stop_script() -> str:
    (container,) = node_deployment()["spec"]["template"]["spec"]["containers"]
    return container["lifecycle"]["preStop"]["exec"]["command"][2]


@pytest.mark.parametrize(
    ("sessions", "timeout_s", "serving", "polls"),
    [([], "90", True, 1), ([{"id": "s1"}], "0", True, 0), ([], "90", False, 0)],
    ids=["drained-at-once", "deadline-passed", "node-not-serving"],
)
def test_node_pre_stop_drains_through_the_node_api(sessions, timeout_s, serving, polls):
    """The preStop script against a stand-in node API: it asks for a drain, polls the live
    sessions while they last and the deadline allows, and never fails the hook."""
    import json
    import sys
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from signaling.auth import TokenVerifier

    calls: list[tuple[str, str]] = []
    verifier = TokenVerifier(secret=SECRET_SAMPLE)

    class Api(BaseHTTPRequestHandler):
        def _answer(self, body) -> None:
            caller = verifier.verify(self.headers.get("Authorization", "").removeprefix("Bearer "))
            assert caller.is_admin  # the hook signs its own admin token with the cluster's secret
            calls.append((self.command, self.path))
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            self._answer({"state": "draining"})

        def do_GET(self):
            self._answer(sessions)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    port = server.server_address[1]
    if serving:
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    else:
        server.server_close()  # the port refuses connections
    try:
        script = _pre_stop_script().replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", script], check=False, capture_output=True, text=True, timeout=20,
            env={**os.environ, "DRAIN_TIMEOUT_S": timeout_s, "SWAPCAST_AUTH__JWT_SECRET": SECRET_SAMPLE},
        )
    finally:
        if serving:
            server.shutdown()
            server.server_close()
    assert done.returncode == 0, done.stderr
    if serving:
        assert calls[0] == ("POST", "/api/v1/nodes/self/drain")
        assert calls[1:] == [("GET", "/api/v1/sessions")] * polls
    else:
        assert calls == [] and "drain:" in done.stdout


def test_services_select_existing_pods_and_ports():
    templates = [(w, w["spec"]["template"]["metadata"]["labels"]) for w in workloads()]
    for service in k8s("Service"):
        where = f"Service {service['metadata']['name']}"
        selector = service["spec"]["selector"]
        matching = [w for w, labels in templates if selector.items() <= labels.items()]
        assert matching, f"{where}: selects no pod template"
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for workload in matching:
                declared = [p for c in containers(workload) for p in c.get("ports", [])]
                assert any(p.get("name") == target or p["containerPort"] == target for p in declared), (
                    f"{where}: targetPort {target!r} not on {workload['metadata']['name']}"
                )

    gateway = k8s("Service", "swapcast-gateway")[0]["spec"]
    assert gateway["type"] == "LoadBalancer"
    assert {(p["port"], p.get("protocol", "TCP")) for p in gateway["ports"]} == {(8080, "TCP"), (1935, "TCP")}
    assert k8s("Service", "redis")[0]["spec"]["ports"][0]["port"] == 6379


def test_gateway_deployment_probes():
    (container,) = containers(k8s("Deployment", "swapcast-gateway")[0])
    _, flags = check_command_line([expand(a, k8s_container_env(container)) for a in container["args"]], "gateway")
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert _resolve_port(container, container["readinessProbe"]["httpGet"]["port"]) == int(flags["--port"])


def test_hpa_scales_nodes_on_sessions_per_node():
    (hpa,) = k8s("HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    node = node_deployment()
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment", node["metadata"]["name"])
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == "swapcast_sessions"
    assert metric["pods"]["target"]["type"] == "AverageValue"
    average = float(metric["pods"]["target"]["averageValue"])
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    # the target leaves room below what a node accepts
    config = configmap_config()
    capacity = config.cluster.capacity or config.webrtc.max_sessions
    assert 0 < average < capacity


def test_pod_disruption_budgets_cover_their_pods():
    templates = [w["spec"]["template"]["metadata"]["labels"] for w in workloads()]
    names = set()
    for pdb in k8s("PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        assert any(selector.items() <= labels.items() for labels in templates), pdb["metadata"]["name"]
        names.add(pdb["metadata"]["name"])
    assert "swapcast-node" in names
    node_pdb = k8s("PodDisruptionBudget", "swapcast-node")[0]["spec"]
    assert node_pdb["selector"]["matchLabels"].items() <= node_deployment()["spec"]["template"]["metadata"]["labels"].items()


def test_references_to_configmaps_and_claims_exist():
    for workload in workloads():
        pod = workload["spec"]["template"]["spec"]
        volume_names = {v["name"] for v in pod.get("volumes", [])}
        volume_names |= {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
        for volume in pod.get("volumes", []):
            if "configMap" in volume:
                k8s("ConfigMap", volume["configMap"]["name"])
            if "persistentVolumeClaim" in volume:
                k8s("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
        for container in pod["containers"]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volume_names, f"{workload['metadata']['name']}: no volume {mount['name']}"
            for source in container.get("envFrom", []):
                k8s("ConfigMap", source["configMapRef"]["name"])


@cache
def configmap_config_text() -> str:
    return k8s("ConfigMap", "swapcast-config")[0]["data"]["swapcast.yaml"]


def configmap_config() -> Config:
    return load_config_text(configmap_config_text(), {})


def load_config_text(text: str, environ: dict[str, str]) -> Config:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "swapcast.yaml"
        path.write_text(text, encoding="utf-8")
        return load_config(path, environ={k: v for k, v in environ.items() if k != CONFIG_ENV})


def test_configmap_holds_a_valid_swapcast_config():
    text = configmap_config_text()
    config = configmap_config()  # unknown keys or bad values raise ConfigError
    raw = yaml.safe_load(text)
    assert raw and set(raw) <= set(Config.model_fields)
    assert config.engine.models_dir == Path("/models")
    assert config.engine.engine_cache_dir == Path("/engines")
    assert config.server.data_dir == Path("/data")
    # the image's SWAPCAST_* environment beats the file: where both set a key they must agree
    for stage in ("cpu", "gpu"):
        env = dockerfile_stages()[stage]["env"]
        with_env = load_config_text(text, env)
        for name in env:
            if name.startswith(ENV_PREFIX) and name != CONFIG_ENV:
                section, key = name[len(ENV_PREFIX) :].lower().split("__")
                if key in raw.get(section, {}):
                    assert getattr(getattr(config, section), key) == getattr(getattr(with_env, section), key), (
                        f"the {stage} image's {name} silently overrides config.yaml's {section}.{key}"
                    )


def test_every_k8s_swapcast_container_runs_a_real_command_with_a_loadable_config():
    seen = set()
    for workload, container in swapcast_k8s_containers():
        where = f"{workload['metadata']['name']}/{container['name']}"
        assert container.get("command") in (None, ["swapcast"]), f"{where}: the image's ENTRYPOINT is swapcast"
        env = k8s_container_env(container)
        argv = [expand(str(a), env) for a in container["args"]]
        assert not any(VAR_REF.search(a) for a in argv), f"{where}: unresolved $(VAR) in {argv}"
        command, flags = check_command_line(argv, where)
        seen.add(command)

        full_env = {**image_env(container["image"]), **env}
        assert_env_names_are_config_keys(full_env, where)
        # SWAPCAST_CONFIG points at the mounted swapcast-config ConfigMap
        pod = workload["spec"]["template"]["spec"]
        config_volumes = {v["name"] for v in pod["volumes"] if v.get("configMap", {}).get("name") == "swapcast-config"}
        mounted = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in config_volumes]
        assert mounted and full_env[CONFIG_ENV] == f"{mounted[0]}/swapcast.yaml", where

        config = load_config_text(configmap_config_text(), full_env)
        assert config.cluster.redis_url == flags["--redis"], f"{where}: --redis and the config disagree"
        mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
        assert str(config.server.data_dir) in mounts, f"{where}: server.data_dir is not a volume"
        if command in ("serve", "worker"):
            assert mounts[str(config.engine.models_dir)].get("readOnly") is True, where
            assert str(config.engine.engine_cache_dir) in mounts, where
            assert config.engine.device == "cuda"
            assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == "1", where
        if command == "serve":
            assert config.webrtc.host_addresses == [FIELD_SAMPLES["status.hostIP"]]
            assert config.cluster.node_id == FIELD_SAMPLES["metadata.name"]
    assert seen == {"serve", "gateway", "worker"}


# --------------------------------------------------------------------------- compose


def test_compose_redis_has_a_healthcheck():
    redis = services()["redis"]
    assert redis["image"].startswith("redis:7")
    test = redis["healthcheck"]["test"]
    assert "redis-cli" in test and "ping" in test


def test_compose_gateway_publishes_http_and_rtmp():
    gateway = services()["gateway"]
    command, flags = check_command_line(gateway["command"], "compose gateway")
    assert command == "gateway"
    published = {str(p).split(":")[-1]: str(p).rsplit(":", 1)[0] for p in gateway["ports"]}
    assert published.get(flags["--port"]) == "8080"
    assert published.get(flags["--rtmp-port"]) == "1935"
    assert gateway["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose_two_cpu_nodes_and_a_gpu_profile():
    cpu_nodes, gpu_nodes, device_ids = {}, {}, []
    for name, service in swapcast_compose_services():
        command, flags = check_command_line(service["command"], f"compose {name}")
        where = f"compose {name}"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy", where
        if command != "serve":
            continue
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
        host, _, port = flags["--advertise"].rpartition(":")
        assert host == name and port == flags["--port"], f"{where}: advertises {flags['--advertise']}"
        if "gpu" in service.get("profiles", []):
            assert len(devices) == 1, f"{where}: one device reservation"
            (device,) = devices
            assert device["driver"] == "nvidia" and "gpu" in device["capabilities"], where
            assert ("count" in device) != ("device_ids" in device), f"{where}: count or device_ids, not both"
            if "count" in device:
                assert device["count"] == 1, f"{where}: exactly one GPU"
            else:
                assert len(device["device_ids"]) == 1, f"{where}: exactly one GPU"
                device_ids.append(device["device_ids"][0])
            assert service["build"]["target"] == "gpu", where
            gpu_nodes[name] = flags["--advertise"]
        else:
            assert not devices and not service.get("profiles"), f"{where}: CPU nodes run without a profile"
            cpu_nodes[name] = flags["--advertise"]
    assert len(cpu_nodes) == 2 and len(set(cpu_nodes.values())) == 2, cpu_nodes
    assert len(gpu_nodes) >= 1 and len(set(gpu_nodes.values())) == len(gpu_nodes), gpu_nodes
    assert len(set(device_ids)) == len(device_ids), f"GPU nodes share a device: {device_ids}"


def _mounts(service: dict) -> dict[str, dict]:
    """Target -> {source, read_only} for short and long volume syntax."""
    result = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            parts = volume.split(":")
            result[parts[1]] = {"source": parts[0], "read_only": len(parts) > 2 and "ro" in parts[2].split(",")}
        else:
            result[volume["target"]] = {"source": volume["source"], "read_only": bool(volume.get("read_only"))}
    return result


def test_compose_volumes_models_read_only_shared_data_and_engine_cache():
    named = set(compose().get("volumes") or {})
    for name, service in swapcast_compose_services():
        where = f"compose {name}"
        env = {**image_env(service["image"]), **compose_env(service)}
        assert_env_names_are_config_keys(env, where)
        config = load_config(environ=env)
        mounts = _mounts(service)
        data = mounts[str(config.server.data_dir)]
        assert data["source"] in named and not data["read_only"], f"{where}: data_dir on a shared named volume"
        if service["command"][0] in ("serve", "worker"):
            assert mounts[str(config.engine.models_dir)]["read_only"], f"{where}: models mounted read-only"
            cache = mounts[str(config.engine.engine_cache_dir)]
            assert cache["source"] in named and not cache["read_only"], where
        if "gpu" in service.get("profiles", []):
            assert config.engine.device == "cuda", where
    sources = {_mounts(s)["/data"]["source"] for _, s in swapcast_compose_services()}
    assert len(sources) == 1, f"every process shares one data volume, not {sources}"


def test_compose_builds_dockerfile_targets():
    stages = dockerfile_stages()
    for name, service in swapcast_compose_services():
        build = service["build"]
        assert build.get("context", ".") == "." and build["target"] in stages, name
        assert service["image"].endswith(f":{build['target']}"), f"{name}: image tag names its target"
    assert services()["worker"]["healthcheck"] == {"disable": True}  # no HTTP server in the worker


COMPOSE_TOP = {"name", "services", "volumes", "networks", "configs", "secrets", "include"}
COMPOSE_SERVICE_KEYS = {
    "image", "build", "command", "entrypoint", "environment", "env_file", "ports", "expose", "volumes",
    "depends_on", "healthcheck", "restart", "profiles", "deploy", "networks", "network_mode", "user",
    "working_dir", "labels", "logging", "runtime", "stop_grace_period", "stop_signal", "ulimits", "shm_size",
    "cap_add", "cap_drop", "security_opt", "tmpfs", "read_only", "init", "extra_hosts", "hostname", "container_name",
}


def _compose_command() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], check=False, capture_output=True, timeout=20)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_compose_file_is_valid():
    """`docker compose config -q` where the compose plugin exists; our own key check always."""
    data = compose()
    extra = {k for k in data if not k.startswith("x-")} - COMPOSE_TOP  # x-*: extension fields
    assert not extra, extra
    for name, service in data["services"].items():
        unknown = set(service) - COMPOSE_SERVICE_KEYS
        assert not unknown, f"compose {name}: unknown keys {unknown}"
        for dependency in service.get("depends_on", {}):
            assert dependency in data["services"], f"compose {name}: depends on unknown {dependency}"
        for target, mount in _mounts(service).items():
            assert target.startswith("/"), f"compose {name}: {target}"
            if not mount["source"].startswith((".", "/")):
                assert mount["source"] in (data.get("volumes") or {}), f"compose {name}: undeclared volume {mount['source']}"
    checker = shutil.which("check-jsonschema")  # PyPI; ships the compose-spec schema
    if checker:
        done = _run_tool([checker, "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)])
        assert done.returncode == 0, done.stdout + done.stderr
    command = _compose_command()
    if command is not None:
        env = {k: v for k, v in os.environ.items() if k not in ("COMPOSE_FILE", "COMPOSE_PROFILES")}
        for profiles in ([], ["--profile", "gpu"]):
            done = subprocess.run(
                [*command, "-f", str(COMPOSE_FILE), *profiles, "config", "-q"],
                check=False, capture_output=True, text=True, timeout=60, cwd=REPO, env=env,
            )
            assert done.returncode == 0, f"{' '.join(command)} config {' '.join(profiles)}: {done.stderr}"


# --------------------------------------------------------------------------- Dockerfile


def test_dockerfile_targets_user_entrypoint_and_healthcheck():
    stages = dockerfile_stages()
    assert {"cpu", "gpu"} <= set(stages)
    assert list(stages)[-1] == "cpu", "a plain `docker build .` builds the CPU image"
    requires = re.search(r'requires-python\s*=\s*">=(\d+\.\d+)"', (REPO / "pyproject.toml").read_text()).group(1)
    for name in ("cpu", "gpu"):
        stage = stages[name]
        assert re.fullmatch(rf"python:{re.escape(requires)}-slim-\w+", stage["base"]), f"{name}: base {stage['base']}"
        keywords = dict(stage["instructions"])  # the last of each kind
        user = keywords["USER"]  # numeric, so Kubernetes' runAsNonRoot can verify it
        assert re.fullmatch(r"[1-9]\d*(:\d+)?", user), f"{name}: runs as {user!r}"
        assert yaml.safe_load(keywords["ENTRYPOINT"]) == ["swapcast"], name
        assert "/healthz" in keywords["HEALTHCHECK"] and "CMD" in keywords["HEALTHCHECK"], name
        exposed = {p.split("/")[0] for p in keywords["EXPOSE"].split()}
        assert exposed == {"8080", "1935"}, name
        assert_env_names_are_config_keys(stage["env"], f"Dockerfile {name}")
        config = load_config(environ=stage["env"])
        assert config.server.host == "0.0.0.0" and config.server.data_dir == Path("/data"), name
    assert load_config(environ=stages["gpu"]["env"]).engine.device == "cuda"
    assert "video" in stages["gpu"]["env"]["NVIDIA_DRIVER_CAPABILITIES"]  # NVENC / NVDEC


def test_dockerfile_passes_hadolint_where_installed():
    hadolint = shutil.which("hadolint")
    if hadolint:
        done = _run_tool([hadolint, "--failure-threshold", "info", str(DOCKERFILE)])
        assert done.returncode == 0, done.stdout + done.stderr
    # without hadolint: the instructions parse and every stage has a base
    assert all(stage["base"] for stage in dockerfile_stages().values())


def test_dockerfile_installs_the_project_its_libraries_and_the_gpu_extra():
    stages = dockerfile_stages()

    def runs(name: str) -> str:
        return " ".join(rest for s in stage_chain(name) for k, rest in s["instructions"] if k == "RUN")

    def copies(name: str) -> list[str]:
        return [rest for s in stage_chain(name) for k, rest in s["instructions"] if k == "COPY"]

    bootstrap = (REPO / "scripts" / "bootstrap").read_text()
    debian = set(re.search(r"DEBIAN_PACKAGES=\(([^)]*)\)", bootstrap).group(1).split())
    installed = set(re.search(r"apt-get install[^&]*", runs("cpu")).group(0).split()) - {"apt-get", "install"}
    packages = {p for p in installed if not p.startswith("-")}
    assert {"libgl1", "libglib2.0-0", "ffmpeg"} <= packages <= debian, packages
    # The final images copy the venv and the source tree from the stages that installed them
    for name, app in (("cpu", "app-cpu"), ("gpu", "app-gpu")):
        assert any(f"--from={app} /opt/venv" in c for c in copies(name)), name
        assert "pip install" in runs(app) and "-e /opt/swapcast" in runs(app), app
        assert "['project']['dependencies']" in runs(app), app
    assert "['optional-dependencies']['gpu']" in runs("app-gpu")
    assert "['optional-dependencies']['gpu']" not in runs("app-cpu")
    assert stages["gpu"]["base"] == stages["cpu"]["base"], "one platform for both images (see the Dockerfile)"


def _dockerignored(path: str, patterns: list[str]) -> bool:
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        anywhere = pattern.startswith("**/")
        pattern = pattern.removeprefix("**/").rstrip("/")
        for prefix in prefixes:
            candidates = [prefix] + (["/".join(prefix.split("/")[j:]) for j in range(1, prefix.count("/") + 1)] if anywhere else [])
            if any(fnmatch.fnmatchcase(c, pattern) for c in candidates):
                return True
    return False


def test_dockerignore_keeps_what_the_image_needs():
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    assert not any(p.startswith("!") for p in patterns), "keep the checker simple: no exceptions"
    needed = ["pyproject.toml", "README.md", "web/index.html", "swapcast/cli.py", "swapcast/app.py"]
    needed += [f"{pkg}/__init__.py" for pkg in ("gpu", "streamer", "signaling")]
    for path in needed:
        assert (REPO / path).exists(), path
        assert not _dockerignored(path, patterns), f".dockerignore drops {path}"
    for path in (".venv/bin/python", ".git/HEAD", "tests/test_deploy.py", "swapcast/__pycache__/cli.cpython-311.pyc"):
        assert _dockerignored(path, patterns), f".dockerignore keeps {path}"


def test_env_names_everywhere_are_config_keys():
    """A typo in a SWAPCAST_* name would make every process refuse to start."""
    names: dict[str, str] = {}
    for _, container in swapcast_k8s_containers():
        names |= {n: "k8s" for n in k8s_container_env(container)}
    for name, service in swapcast_compose_services():
        names |= {n: f"compose {name}" for n in compose_env(service)}
    for stage in ("cpu", "gpu"):
        names |= {n: f"Dockerfile {stage}" for n in dockerfile_stages()[stage]["env"]}
    assert any(n.startswith(ENV_PREFIX) for n in names)
    for name, where in names.items():
        assert_env_names_are_config_keys([name], where)
        if not name.startswith(ENV_PREFIX):
            assert not name.upper().startswith("SWAPCAST"), f"{where}: {name}"
