"""Where a node gets its converted tracking models, and the manifest that lets it load
them without mediapipe.

The graphs are converted from the TFLite files inside the mediapipe wheel
(``gpu.models.tflite_onnx``). A node without that wheel (a GPU image, a device machine)
cannot convert; it loads a folder converted elsewhere (``swapcast models convert``, the
image's build stage) by this manifest, importing neither mediapipe nor the converter: which
ONNX file is which model, the TFLite file it came from (SHA-256) and the converter version
that wrote it. A manifest from another
converter version is stale (the emitted graphs differ); a file that does not hash as
written was cut short or replaced. Either is refused with what to run instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpu.errors import ModelFileError
from gpu.models.builtin import MediapipeFaceModels

if TYPE_CHECKING:
    import onnx

# Bump when the emitted graph changes, so conversions by older code are not reused.
CONVERTER_VERSION = 4  # 4: the palm detector and hand landmarks join the set
INPUT_NAME = "input"  # every converted model's one input, float32 [N, 3, H, W]
MANIFEST_NAME = "tracking-models.json"
FORMAT = 1
# the models the tracking graphs run, by their TFLite file names in the wheel: the face's
# three and the hands' two (``gpu.analysis.hands``)
TRACKING_TFLITE = ("face_landmark.tflite", "face_detection_short_range.tflite", "face_detection_full_range_sparse.tflite",
                   "palm_detection_full.tflite", "hand_landmark_lite.tflite")
CONVERT_HINT = ("run `swapcast models convert --cache-dir DIR` on a machine with the mediapipe wheel "
                "(pip install -e . there) and give this node DIR as engine.engine_cache_dir, "
                "or run the swapcast image, which converts them at build")


class TrackingModelsUnavailable(ModelFileError):
    """Neither the mediapipe wheel nor a usable converted folder: the node cannot track."""

    def __init__(self, folder: object, problem: str) -> None:
        super().__init__(folder, f"{problem}; {CONVERT_HINT}")


@dataclass(frozen=True)
class ConvertedModel:
    onnx: str  # file name in the manifest's folder
    tflite_sha256: str
    onnx_sha256: str


@dataclass(frozen=True)
class TrackingManifest:
    converter_version: int
    models: dict[str, ConvertedModel]  # by TFLite file name

    @staticmethod
    def path(folder: Path) -> Path:
        return folder / MANIFEST_NAME

    @classmethod
    def read(cls, folder: Path) -> TrackingManifest:
        path = cls.path(folder)
        try:
            data = json.loads(path.read_text())
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
            models = {name: ConvertedModel(**entry) for name, entry in data["models"].items()}
            return cls(converter_version=int(data["converter_version"]), models=models)
        except FileNotFoundError:
            raise TrackingModelsUnavailable(folder, f"no converted tracking models here ({MANIFEST_NAME} is missing)") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise TrackingModelsUnavailable(path, f"unreadable manifest ({exc})") from exc

    def write(self, folder: Path) -> None:
        """Atomically (temporary file, rename), and not at all when unchanged, so a
        read-only or shared folder that already holds this manifest is left alone."""
        text = json.dumps({"format": FORMAT, **asdict(self)}, indent=2, sort_keys=True) + "\n"
        target = self.path(folder)
        if target.is_file() and target.read_text() == text:
            return
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{MANIFEST_NAME}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def files(self, folder: Path, converter_version: int) -> dict[str, Path]:
        """The ONNX file of each tracking model in ``folder``, by TFLite name, checked:
        written by this converter version, every model present and hashing as written."""
        where = self.path(folder)
        if self.converter_version != converter_version:
            raise TrackingModelsUnavailable(where, f"stale: written by converter version {self.converter_version}, "
                                                   f"this swapcast needs version {converter_version}")
        found = {}
        for name in TRACKING_TFLITE:
            entry = self.models.get(name)
            if entry is None:
                raise TrackingModelsUnavailable(where, f"lists no converted {name}")
            path = folder / entry.onnx
            if not path.is_file() or sha256_of(path) != entry.onnx_sha256:
                raise TrackingModelsUnavailable(path, "missing or not the file the manifest lists (cut short or replaced)")
            found[name] = path
        return found


def tracking_models(cache_dir: Path | None) -> dict[str, Path | onnx.ModelProto]:
    """The tracking graphs' models (``TRACKING_TFLITE``), by TFLite file name. With the mediapipe wheel
    installed: converted from its files (into ``cache_dir`` keyed by their hash, with a
    fresh manifest; else in memory), as before manifests. Without it: ``cache_dir`` by its
    manifest; ``TrackingModelsUnavailable`` (one line: what to run) when that is unset,
    missing, stale or damaged."""
    try:
        wheel = MediapipeFaceModels.locate()
    except ModelFileError as absent:
        return _converted_elsewhere(cache_dir, absent)
    # the converter (and its tflite schema package) only where there is something to convert
    from gpu.models.tflite_onnx import convert_builtin, convert_tflite

    if cache_dir is not None:
        return dict(convert_builtin(cache_dir))
    return {path.name: convert_tflite(path) for path in wheel.files}


def check_tracking_models(cache_dir: Path | None) -> None:
    """Raise ``TrackingModelsUnavailable`` now if ``tracking_models`` could not give the
    models later, without converting: a node checks at start, not at its first session."""
    try:
        MediapipeFaceModels.locate()
    except ModelFileError as absent:
        _converted_elsewhere(cache_dir, absent)


def _converted_elsewhere(cache_dir: Path | None, absent: ModelFileError) -> dict[str, Path]:
    if cache_dir is None:
        raise TrackingModelsUnavailable("engine.engine_cache_dir", "not set, and the mediapipe wheel's models "
                                        f"are not here to convert ({absent.problem})") from None
    return converted_files(cache_dir)


def converted_files(folder: Path) -> dict[str, Path]:
    """The ONNX file of each tracking model in a converted ``folder``, by TFLite name, as its
    manifest lists them (checked; never by file name): for code that must not convert."""
    return TrackingManifest.read(folder).files(folder, CONVERTER_VERSION)


def sha256_of(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ModelFileError(path, f"cannot read: {exc.strerror or exc}") from exc
