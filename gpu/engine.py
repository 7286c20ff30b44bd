"""The face engine of one node: analysis models and one swapper, shared by all sessions.

Built-in models are used unless a user models directory provides neural ones: SCRFD for
still-image detection, ArcFace + inswapper for the swap. Per-stream state (tracking,
smoothing, options) lives with the caller; this object holds only what is loaded once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gpu.analysis.blazeface import BlazeFaceRange
from gpu.analysis.face_mesh import FaceTracker
from gpu.analysis.hands import HandTracker
from gpu.analysis.identity import DlibIdentity
from gpu.analysis.still_faces import StillFaces, analyse_still, still_faces
from gpu.batcher import MicroBatcher
from gpu.device import select_device
from gpu.errors import ManyFacesError, ModelFileError, NoFaceError
from gpu.models.builtin import DlibModels
from gpu.models.converted_tracking import check_tracking_models
from gpu.processors import Processors, ProcessorSettings
from gpu.source_codec import decode_source, encode_source
from gpu.swappers.base import KeepMask, Swapper
from gpu.tracking.graph_tracker import GraphFaceTracker
from gpu.tracking.graphs import TrackingGraphs
from gpu.types import Face

SwapperName = Literal["auto", "mesh", "mesh3d", "inswapper"]
TrackerName = Literal["mediapipe", "graphs"]


@dataclass(frozen=True)
class EngineSettings:
    swapper: SwapperName = "auto"  # auto = inswapper when the models directory has it, else mesh3d
    models_dir: Path | None = None
    prefer_fp16: bool = False
    crop_size: int = 256  # mesh swapper's aligned crop (inswapper is fixed at 128)
    max_faces: int = 4  # per frame, when tracking video
    detector_range: BlazeFaceRange = "full"  # BlazeFace model of the whole-frame pass (the tiles: see gpu/analysis/detection.py)
    tracker: TrackerName = "graphs"  # video tracking: the converted graphs, batched across sessions (gpu/tracking/), or mediapipe's own
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto = CUDA when CuPy sees a GPU
    runner: Literal["auto", "onnxruntime", "torch", "tensorrt", "triton"] = "auto"  # auto: TensorRT > Torch on CUDA, else ONNX Runtime
    triton_url: str = "http://127.0.0.1:8000"  # runner triton: the server's HTTP/REST endpoint (the swap model runs there)
    triton_timeout_s: float = 1.0  # runner triton: one request; slower = the frame goes on unswapped
    triton_model: str = ""  # runner triton: the swap model's name on the server ("" = the swapper's own name)
    runner_threads: int = 0  # ONNX Runtime intra-op threads (0 = one per core, up to 4)
    max_batch: int = 32  # micro-batcher: rows per runner call
    max_queue_delay_ms: float = 4.0  # micro-batcher: longest wait of the oldest row before a batch ships
    engine_cache_dir: Path | None = None  # TensorRT engine + timing caches (default: <data_dir>/engines)
    processors: ProcessorSettings = ProcessorSettings()  # occluder, parser, enhancer, content gate (user models)


@dataclass(frozen=True)
class SourceFace:
    """A registered source: where it was found, who it is, and the swapper's own data."""

    face: Face
    identity: np.ndarray  # dlib 128-d descriptor
    payload: Any  # what the swapper's register() returned


class FaceEngine:
    """Loads the models once; gives sessions source registration, still-image analysis
    and per-stream trackers. Owns the node's micro-batcher for the swapper's runner: every
    session's face rows go through ``engine.batcher`` so they share runner calls."""

    def __init__(self, settings: EngineSettings | None = None) -> None:
        self.settings = settings or EngineSettings()
        dlib = DlibModels.locate()  # not mediapipe's: a node without that wheel tracks on converted graphs
        self._identity = DlibIdentity(dlib.landmarks_68, dlib.identity)
        if self.settings.tracker == "graphs":  # no wheel and no converted folder: stop now, not at the first session
            check_tracking_models(self.settings.engine_cache_dir)
        self._detector = self._make_detector()  # a user SCRFD model, else None: the built-in finder
        # still-image analysis on the tracker's backend (made on first use): one caller at a time
        self._still: StillFaces | None = None
        self._still_lock = threading.Lock()
        self.device = select_device(self.settings.device)  # CUDA requested but absent: a clear error
        self.swapper: Swapper = self._make_swapper()
        # FaceFusion's other processors found in the models folder, each with a batcher of its own
        self.processors = Processors.load(self._user_models(), self.settings.processors, self._runner_for,
                                          max_batch=self.settings.max_batch,
                                          max_queue_delay_ms=self.settings.max_queue_delay_ms)
        # mask models (occluder, face parser) whose keep masks every swap honours, besides
        # each stream's built-in occlusion estimate (see gpu.swappers.base.KeepMask)
        self.keep_masks: tuple[KeepMask, ...] = self.processors.keep_masks
        self._batcher: MicroBatcher | None = None  # made on first use: an engine that never swaps starts no threads
        self._batcher_lock = threading.Lock()
        self._batch_params = (self.settings.max_batch, self.settings.max_queue_delay_ms)
        self._tracking: TrackingGraphs | None = None  # made by the first graphs tracker
        self._tracking_lock = threading.Lock()

    @property
    def batcher(self) -> MicroBatcher:
        """The node's micro-batcher for the swapper's runner (``max_batch``, ``max_queue_delay_ms``)."""
        with self._batcher_lock:
            if self._batcher is None or self._batcher.closed:
                self._batcher = self._make_batcher(*self._batch_params)
            return self._batcher

    def batch_metrics(self) -> dict[str, Any] | None:
        """The batcher's numbers (see ``MicroBatcher.metrics``), None before the first swap."""
        with self._batcher_lock:
            batcher = self._batcher
        return batcher.metrics() if batcher is not None and not batcher.closed else None

    def runner_statistics(self, cached: bool = False) -> dict[str, Any] | None:
        """The swap model server's own numbers (runner triton: Triton's statistics, with
        ``model``), None for an in-process runner or an unreachable server. Blocking
        (an HTTP call): callers on an event loop run it in a thread; ``cached``: the last
        numbers read, without asking the server."""
        runner = self.swapper.runner
        statistics = getattr(runner, "statistics", None)
        if statistics is None:
            return None
        numbers = getattr(runner, "recent_statistics", None) if cached else statistics()
        return None if numbers is None else {**numbers, "model": runner.name}

    def runner_health(self) -> tuple[bool, str]:
        """(ready, why) of the swap model's runner: a model server's answer, else ready.
        Blocking like ``runner_statistics``."""
        health = getattr(self.swapper.runner, "health", None)
        return health() if health is not None else (True, "in process")

    def _make_batcher(self, max_batch: int, max_queue_delay_ms: float) -> MicroBatcher:
        # a runner that can take several calls at once (one execution context per CUDA
        # stream, mesh3d's OpenCV twin on every core) says so with ``max_concurrency``; one
        # whose calls gain nothing from company (that twin) with ``gains_from_batching``
        runner = self.swapper.runner
        return MicroBatcher(
            runner,
            max_batch=max_batch,
            max_queue_delay_ms=max_queue_delay_ms,
            max_in_flight=int(getattr(runner, "max_concurrency", 1)),
            wait_for_company=bool(getattr(runner, "gains_from_batching", True)),
            name=f"batcher-{self.swapper.name}",
        )

    def configure_batcher(self, max_batch: int | None = None, max_queue_delay_ms: float | None = None) -> MicroBatcher:
        """Replace the batcher (benchmarks compare batched with max_batch=1); only between
        runs: rows still queued on the old one fail with ``BatcherClosed``."""
        with self._batcher_lock:
            old = self._batcher
            self._batch_params = (
                self._batch_params[0] if max_batch is None else max_batch,
                self._batch_params[1] if max_queue_delay_ms is None else max_queue_delay_ms,
            )
            self._batcher = new = self._make_batcher(*self._batch_params)
        if old is not None:
            old.close()
        return new

    def close(self) -> None:
        """Stop the batcher (its threads); the engine's models need no closing (a Triton
        runner gives back its shared memory). A later swap makes a new batcher."""
        with self._batcher_lock:
            batcher, self._batcher = self._batcher, None
        if batcher is not None:
            batcher.close()
        close_runner = getattr(self.swapper.runner, "close", None)  # runner triton: its shared memory
        if close_runner is not None:
            close_runner()
        self.processors.close()
        with self._still_lock:
            self._still = None  # it runs on the tracking graphs closed below
        with self._tracking_lock:
            tracking, self._tracking = self._tracking, None
        if tracking is not None:
            tracking.close()

    @property
    def detector_name(self) -> str:
        if self._detector is None:
            return "FaceFinder"
        return getattr(self._detector, "name", type(self._detector).__name__)

    def _user_models(self):
        from gpu.models.user_models import UserModels

        if self.settings.models_dir is None:
            return None
        return UserModels.discover(self.settings.models_dir, prefer_fp16=self.settings.prefer_fp16)

    def _make_detector(self):
        models = self._user_models()
        if models is not None and models.detector is not None:
            from gpu.analysis.scrfd import ScrfdDetector

            return ScrfdDetector(models.detector)
        return None

    def _still_faces(self) -> StillFaces:
        """Still-image analysis on ``settings.tracker``'s backend: the converted graphs run
        through the node's tracking batchers (no mediapipe needed), or mediapipe's graphs."""
        if self._still is None:
            self._still = still_faces(self.settings.tracker, lambda: self.tracking_graphs, self.settings.detector_range)
        return self._still

    def _make_swapper(self) -> Swapper:
        choice = self.settings.swapper
        models = self._user_models()
        has_inswapper = models is not None and models.swapper is not None
        if choice == "inswapper" or (choice == "auto" and has_inswapper):
            if models is None or models.swapper is None:
                where = self.settings.models_dir or "(no --models directory given)"
                raise ModelFileError(where, "swapper 'inswapper' needs inswapper_128.onnx or inswapper_128_fp16.onnx")
            if models.embedder is None:
                raise ModelFileError(models.directory, "inswapper needs the ArcFace model w600k_r50.onnx beside it")
            from gpu.analysis.arcface import ArcFaceEmbedder
            from gpu.swappers.inswapper import InswapperSwapper

            return InswapperSwapper(models.swapper, ArcFaceEmbedder(models.embedder), make_runner=self._swap_runner_for)
        if choice in ("auto", "mesh3d"):
            from gpu.swappers.mesh3d import Mesh3dSwapper

            return Mesh3dSwapper(runner=self._mesh3d_runner(), crop_size=self.settings.crop_size)
        from gpu.swappers.mesh import MeshSwapper
        from gpu.swappers.mesh_graph import build_mesh_swap_graph

        return MeshSwapper(runner=self._swap_runner_for(build_mesh_swap_graph(), "mesh_swap"), crop_size=self.settings.crop_size)

    def _mesh3d_runner(self):
        """mesh3d's per-pixel graph on the node's runner; on a CPU node with runner auto, its
        OpenCV twin (the same output in a third of ONNX Runtime's CPU time, see
        ``gpu.swappers.mesh3d_graph``). ``runner: onnxruntime`` keeps the ONNX graph there."""
        from gpu.swappers.mesh3d_graph import Mesh3dGraphOnCpu, build_mesh3d_swap_graph

        if self.settings.runner == "auto" and not self.device.is_cuda:
            return Mesh3dGraphOnCpu()
        return self._swap_runner_for(build_mesh3d_swap_graph(), "mesh3d_swap")

    def _swap_runner_for(self, model, name: str):
        """The swap model's runner: with runner triton, the server's model (named
        ``triton_model`` or the swapper's name); else as ``_runner_for``."""
        settings = self.settings
        if settings.runner != "triton":
            return self._runner_for(model, name)
        from gpu.runners.select import make_runner
        from gpu.runners.triton import TritonSettings

        return make_runner(model, runner="triton", name=settings.triton_model or name,
                           triton=TritonSettings(url=settings.triton_url, timeout_s=settings.triton_timeout_s))

    def _runner_for(self, model, name: str):
        """A model's runner on this node's device: TensorRT or Torch on CUDA, ONNX Runtime
        on CPU (or as configured); see ``gpu.runners.select``. With runner triton only the
        swap model goes to the server: the tracking and processor models run here."""
        from gpu.runners.select import make_runner

        settings = self.settings
        runner = "auto" if settings.runner == "triton" else settings.runner
        return make_runner(model, device=self.device, runner=runner, name=name,
                           cache_dir=settings.engine_cache_dir, max_batch=settings.max_batch,
                           threads=settings.runner_threads or None)

    def analyse_image(self, image: np.ndarray) -> list[Face]:
        """Faces in a still RGB image, largest first, on the tracker's backend (the
        converted graphs or mediapipe's, see ``gpu.analysis.still_faces``). Built-in: the
        finder's whole sweep (tiles, HOG), then the mesh on an upright region around each candidate;
        a candidate without a plausible mesh is not a face, and each face's box is its
        mesh's. A user SCRFD detector's faces are kept as it boxes them, meshed where
        the mesh finds them."""
        with self._still_lock:
            still = self._still_faces()
            if self._detector is None:
                return analyse_still(still, image)
            faces = self._detector.detect(image)
            meshed = still.landmarks(image, faces)
            faces = [face if mesh is None else replace(mesh, box=face.box, score=face.score) for face, mesh in zip(faces, meshed)]
            return sorted(faces, key=lambda f: f.area, reverse=True)

    def identity(self, image: np.ndarray, face: Face) -> np.ndarray:
        """dlib identity descriptor: for reference selection and scoring (~60 ms)."""
        return self._identity.embed(image, face)

    def frontal_identity(self, image: np.ndarray, face: Face) -> np.ndarray | None:
        """``identity`` where dlib's frontal detector finds the face, else None (turned
        away, half hidden): what re-identifying people runs on (``gpu.analysis.people``)."""
        return self._identity.embed_frontal(image, face)

    def register_source(self, image: np.ndarray, index: int | None = None, label: str = "source image") -> SourceFace:
        """Pick the source face (the only one, or ``index`` counted from the largest) and
        prepare everything the swapper needs, once. A loaded content gate checks the photo
        first (``ContentRefused`` above its threshold)."""
        if self.processors.gate is not None:
            self.processors.gate.check(image, label, "source")
        face = self.pick_face(image, index, label)
        if face.mesh is None and self.swapper.name in ("mesh", "mesh3d"):
            raise NoFaceError(f"{label}: a face was detected but its landmarks could not be found; use a clearer, frontal photo")
        return SourceFace(face=face, identity=self.identity(image, face), payload=self.swapper.register(image, face))

    def source_to_bytes(self, source: SourceFace) -> bytes:
        """A registered source as bytes (see ``gpu.source_codec``), for the registry."""
        return encode_source(self.swapper.name, source.face, source.identity, source.payload)

    def source_from_bytes(self, data: bytes) -> SourceFace:
        """A source stored by ``source_to_bytes`` on any node running the same swapper."""
        face, identity, payload = decode_source(data, self.swapper.name)
        return SourceFace(face=face, identity=identity, payload=payload)

    def pick_face(self, image: np.ndarray, index: int | None, label: str) -> Face:
        faces = self.analyse_image(image)
        if not faces:
            raise NoFaceError(f"{label}: no face found")
        if index is None:
            if len(faces) > 1:
                raise ManyFacesError(
                    f"{label}: {len(faces)} faces found; choose one with --source-face-index 0..{len(faces) - 1} "
                    "(0 = largest)",
                    len(faces),
                )
            return faces[0]
        if not 0 <= index < len(faces):
            raise ManyFacesError(f"{label}: face index {index} out of range, {len(faces)} face(s) found", len(faces))
        return faces[index]

    @property
    def tracking_graphs(self) -> TrackingGraphs:
        """The node's converted tracking models with their runners and batchers (made on
        first use, converted into ``engine_cache_dir`` when set)."""
        with self._tracking_lock:
            if self._tracking is None:
                settings = self.settings
                self._tracking = TrackingGraphs(self._runner_for, settings.engine_cache_dir,
                                                settings.max_batch, settings.max_queue_delay_ms)
            return self._tracking

    def tracking_metrics(self) -> dict[str, Any] | None:
        """The tracking batchers' numbers by model, None before the first graphs tracker."""
        with self._tracking_lock:
            tracking = self._tracking
        return tracking.metrics() if tracking is not None else None

    def hand_tracker(self, session: str) -> HandTracker:
        """A new per-stream follower of the hands in front of its faces (``gpu.analysis.hands``),
        on the node's converted palm and hand models: what ``occlusion`` keeps whatever the
        hand's skin tone."""
        return HandTracker(self.tracking_graphs, f"hands-{session}")

    def tracker(self, smoothing: bool = True, backend: TrackerName | None = None) -> FaceTracker | GraphFaceTracker:
        """A new per-stream tracker (each video stream needs its own state): ``backend``
        (default ``settings.tracker``) picks mediapipe's graphs or the converted ones."""
        settings = self.settings
        if (backend or settings.tracker) == "graphs":
            return GraphFaceTracker(self.tracking_graphs, max_faces=settings.max_faces, smoothing=smoothing,
                                    detector_range=settings.detector_range)
        return FaceTracker(max_faces=settings.max_faces, smoothing=smoothing, detector_range=settings.detector_range)
