"""A registered source face as bytes, so it can live in the registry and another node can
resume a session without re-running detection: an ``.npz`` archive (no pickle) of the face,
its identity and the swapper's own data. The mesh texture was cut from 8-bit pixels, so it
is stored as uint8 without loss (4x smaller); mesh3d's albedo is stored as uint8 too (a step
of ALBEDO_MAX/255 ~ 0.8 % of the skin's brightness, below what shows), and its per-texel
weight (what several photos are merged by) as uint8 where it has one, with how many
texels a pixel of its photo spanned (what its sharpening on a larger face is sized by)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from gpu.errors import SwapcastError
from gpu.types import Face

FORMAT_VERSION = 1


class SourceCodecError(SwapcastError):
    """Stored source bytes cannot be used by this node (damaged, or another swapper's)."""


def encode_source(swapper: str, face: Face, identity: np.ndarray, payload: Any) -> bytes:
    arrays: dict[str, np.ndarray] = {
        "version": np.array(FORMAT_VERSION),
        "swapper": np.array(swapper),
        "box": face.box,
        "kps": face.kps,
        "score": np.array(face.score, dtype=np.float32),
        "identity": np.asarray(identity, dtype=np.float32),
    }
    if face.mesh is not None:
        arrays["mesh"] = face.mesh
    if face.depth is not None:
        arrays["depth"] = face.depth
    if swapper == "mesh":
        arrays["texture"] = np.round(payload.texture * 255.0).astype(np.uint8)
        arrays["points"] = payload.points
        arrays["triangles"] = payload.triangles
    elif swapper == "mesh3d":
        from gpu.swappers.mesh3d import ALBEDO_MAX

        arrays["albedo"] = np.round(np.clip(payload.albedo / ALBEDO_MAX, 0.0, 1.0) * 255.0).astype(np.uint8)
        arrays["lighting"] = payload.lighting
        arrays["shape"] = payload.shape
        if payload.weight is not None:
            arrays["weight"] = np.round(np.clip(payload.weight, 0.0, 1.0) * 255.0).astype(np.uint8)
        arrays["photo_texels"] = np.array(payload.photo_texels, dtype=np.float32)
    else:
        arrays["latent"] = np.asarray(payload, dtype=np.float32)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def decode_source(data: bytes, swapper: str) -> tuple[Face, np.ndarray, Any]:
    """(face, identity, payload) for a node whose swapper is ``swapper``."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except Exception as exc:
        raise SourceCodecError(f"stored source face is damaged: {exc}") from None
    if int(arrays.get("version", -1)) != FORMAT_VERSION:
        raise SourceCodecError("stored source face has an unknown format version")
    stored = str(arrays["swapper"])
    if stored != swapper:
        raise SourceCodecError(f"stored source face was prepared for the {stored} swapper; this node runs {swapper}")
    face = Face(box=arrays["box"], kps=arrays["kps"], score=float(arrays["score"]), mesh=arrays.get("mesh"),
                depth=arrays.get("depth"))
    if swapper == "mesh":
        from gpu.swappers.mesh import MeshSource

        payload: Any = MeshSource(
            texture=arrays["texture"].astype(np.float32) / 255.0, points=arrays["points"], triangles=arrays["triangles"]
        )
    elif swapper == "mesh3d":
        from gpu.swappers.mesh3d import ALBEDO_MAX, Mesh3dSource

        weight = arrays.get("weight")  # absent from sources stored before it was kept: all trusted
        payload = Mesh3dSource(
            albedo=arrays["albedo"].astype(np.float32) * (ALBEDO_MAX / 255.0), lighting=arrays["lighting"], shape=arrays["shape"],
            weight=None if weight is None else weight.astype(np.float32) / 255.0,
            photo_texels=_photo_texels(arrays.get("photo_texels")),
        )
    else:
        payload = arrays["latent"]
    return face, arrays["identity"], payload


MAX_PHOTO_TEXELS = 64.0  # a photo whose pixel spans more of the albedo than this had a face a few pixels wide


def _photo_texels(stored: np.ndarray | None) -> float:
    """The stored source's texels per photo pixel; 0 (never sharpened) for bytes stored before
    it was kept."""
    if stored is None:
        return 0.0
    if stored.shape != () or not np.issubdtype(stored.dtype, np.floating):
        raise SourceCodecError("stored source face is damaged: photo_texels is not a number")
    value = float(stored)
    if not 0.0 <= value <= MAX_PHOTO_TEXELS:  # NaN fails too
        raise SourceCodecError(f"stored source face is damaged: photo_texels {value} is outside 0-{MAX_PHOTO_TEXELS:g}")
    return value
