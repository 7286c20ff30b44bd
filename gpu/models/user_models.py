"""Find the model files a user already has (FaceFusion / insightface layout); never download.

Besides the swap models: FaceFusion's processors (XSeg occluder, BiSeNet parser, face
enhancers, the open_nsfw content gate; see ``gpu.processors``), found by their file names.

insightface keeps ``det_10g.onnx`` and ``w600k_r50.onnx`` in a pack folder
(``models/buffalo_l/``) next to ``inswapper_128.onnx``; FaceFusion keeps them all in one
folder. So a file is looked for in the directory first, then one level down.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpu.errors import ModelFileError

DETECTOR_FILE = "det_10g.onnx"
EMBEDDER_FILE = "w600k_r50.onnx"
SWAPPER_FILE = "inswapper_128.onnx"
SWAPPER_FP16_FILE = "inswapper_128_fp16.onnx"
OCCLUDER_FILES = ("xseg_1.onnx", "xseg_2.onnx", "xseg_3.onnx")  # FaceFusion's default first
PARSER_FILES = ("bisenet_resnet_34.onnx", "bisenet_resnet_18.onnx")
ENHANCER_FILES = ("gfpgan_1.4.onnx", "codeformer.onnx", "gpen_bfr_512.onnx", "gpen_bfr_256.onnx")
CONTENT_GATE_FILES = ("open_nsfw.onnx",)


@dataclass(frozen=True)
class UserModels:
    """Paths of the user's model files; ``None`` where the directory has no such file."""

    directory: Path
    detector: Path | None = None
    embedder: Path | None = None
    swapper: Path | None = None
    occluder: Path | None = None
    parser: Path | None = None
    enhancers: tuple[Path, ...] = ()  # every enhancer there, in ENHANCER_FILES order
    content_gate: Path | None = None

    @classmethod
    def discover(cls, directory: str | Path, *, prefer_fp16: bool = False) -> UserModels:
        """Locate the files in ``directory``; ``prefer_fp16`` picks inswapper_128_fp16 when
        both swapper files are there (half the size and memory, same results on GPU)."""
        directory = Path(directory).expanduser()
        if not directory.exists():
            raise ModelFileError(directory, "models directory not found")
        if not directory.is_dir():
            raise ModelFileError(directory, "not a directory (expected the folder holding the .onnx files)")
        swappers = (SWAPPER_FP16_FILE, SWAPPER_FILE) if prefer_fp16 else (SWAPPER_FILE, SWAPPER_FP16_FILE)
        return cls(
            directory=directory,
            detector=_find(directory, DETECTOR_FILE),
            embedder=_find(directory, EMBEDDER_FILE),
            swapper=_first(directory, swappers),
            occluder=_first(directory, OCCLUDER_FILES),
            parser=_first(directory, PARSER_FILES),
            enhancers=tuple(p for p in (_find(directory, name) for name in ENHANCER_FILES) if p),
            content_gate=_first(directory, CONTENT_GATE_FILES),
        )


def _first(directory: Path, names: tuple[str, ...]) -> Path | None:
    return next((p for p in (_find(directory, name) for name in names) if p), None)


def _find(directory: Path, name: str) -> Path | None:
    direct = directory / name
    if direct.is_file():
        return direct
    return next((p for p in sorted(directory.glob(f"*/{name}")) if p.is_file()), None)
