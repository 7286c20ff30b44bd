from __future__ import annotations

import numpy as np
import pytest

from gpu.source_codec import SourceCodecError, decode_source
from streamer.pipeline.frame_swapper import FrameSwapper


def test_a_source_survives_bytes_and_swaps_the_same(engine, astronaut_image, grace_image):
    source = engine.register_source(astronaut_image)
    data = engine.source_to_bytes(source)
    assert len(data) < 400_000
    restored = engine.source_from_bytes(data)
    np.testing.assert_array_equal(restored.identity, source.identity)
    np.testing.assert_array_equal(restored.face.mesh, source.face.mesh)
    np.testing.assert_array_equal(restored.face.depth, source.face.depth)
    # the default (mesh3d) payload: the albedo travels as uint8, the rest exactly
    from gpu.swappers.mesh3d import ALBEDO_MAX

    np.testing.assert_allclose(restored.payload.albedo, source.payload.albedo, atol=ALBEDO_MAX / 510 + 1e-6)
    np.testing.assert_array_equal(restored.payload.lighting, source.payload.lighting)
    np.testing.assert_array_equal(restored.payload.shape, source.payload.shape)
    swapped = []
    for which in (source, restored):
        frame = grace_image.copy()
        assert FrameSwapper(engine, which).process_still(frame).faces_swapped == 1
        swapped.append(frame.astype(int))
    # the albedo's 8-bit rounding (ALBEDO_MAX / 510) is scaled by the light and the tone transfer
    # (up to TONE_RATIO_RANGE's 4x): a few bright pixels may move by 3 levels, hardly any by more than 1
    difference = np.abs(swapped[0] - swapped[1]).max(2)
    assert difference.max() <= 3
    assert (difference > 1).mean() < 0.005


def test_damaged_or_foreign_bytes_say_why(engine, astronaut_image):
    with pytest.raises(SourceCodecError, match="damaged"):
        engine.source_from_bytes(b"not an archive")
    data = engine.source_to_bytes(engine.register_source(astronaut_image))
    with pytest.raises(SourceCodecError, match="prepared for the mesh3d swapper; this node runs inswapper"):
        decode_source(data, "inswapper")


def test_a_mesh3d_source_is_stored_compactly_and_comes_back():
    from gpu.source_codec import encode_source
    from gpu.swappers.mesh3d import ALBEDO_MAX, Mesh3dSource
    from gpu.types import Face

    rng = np.random.default_rng(0)
    mesh = rng.uniform(100, 200, (468, 2)).astype(np.float32)
    face = Face(box=np.array([100, 100, 200, 200], np.float32), kps=mesh[:5], mesh=mesh,
                depth=rng.normal(0, 10, 468).astype(np.float32))
    payload = Mesh3dSource(
        albedo=rng.uniform(0, ALBEDO_MAX, (3, 256, 256)).astype(np.float32),
        lighting=rng.normal(0, 0.3, (9, 3)).astype(np.float32),
        shape=rng.normal(0, 5, (468, 3)).astype(np.float32),
    )
    data = encode_source("mesh3d", face, np.zeros(128, np.float32), payload)
    assert len(data) < 3 * 256 * 256 + 50_000  # the albedo goes as uint8
    restored_face, _, restored = decode_source(data, "mesh3d")
    np.testing.assert_array_equal(restored_face.depth, face.depth)
    np.testing.assert_allclose(restored.albedo, payload.albedo, atol=ALBEDO_MAX / 510 + 1e-6)
    np.testing.assert_array_equal(restored.lighting, payload.lighting)
    np.testing.assert_array_equal(restored.shape, payload.shape)
    assert restored.weight is None  # a source stored without per-texel weights: all trusted
    assert restored.photo_texels == 0.0  # ... and without the photo's resolution: never sharpened


def test_a_mesh3d_sources_texel_weights_travel_and_older_bytes_still_decode():
    """What several photos are merged by (``Mesh3dSource.weight``) is stored as uint8; bytes
    stored before it was kept (no ``weight`` entry) decode with none."""
    import io

    from gpu.source_codec import encode_source
    from gpu.swappers.mesh3d import Mesh3dSource
    from gpu.types import Face

    rng = np.random.default_rng(1)
    mesh = rng.uniform(100, 200, (468, 2)).astype(np.float32)
    face = Face(box=np.array([100, 100, 200, 200], np.float32), kps=mesh[:5], mesh=mesh,
                depth=rng.normal(0, 10, 468).astype(np.float32))
    weight = rng.uniform(0, 1, (64, 64)).astype(np.float32)
    payload = Mesh3dSource(albedo=rng.uniform(0, 2, (3, 64, 64)).astype(np.float32),
                           lighting=np.zeros((9, 3), np.float32), shape=np.zeros((468, 3), np.float32), weight=weight)
    data = encode_source("mesh3d", face, np.zeros(128, np.float32), payload)
    _, _, restored = decode_source(data, "mesh3d")
    np.testing.assert_allclose(restored.weight, weight, atol=1 / 510 + 1e-6)
    with np.load(io.BytesIO(data)) as archive:
        older = {name: archive[name] for name in archive.files if name != "weight"}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **older)
    _, _, restored = decode_source(buffer.getvalue(), "mesh3d")
    assert restored.weight is None
    assert restored.photo_texels == 0.0
    np.testing.assert_allclose(restored.albedo, payload.albedo, atol=2 / 510 + 1e-6)
    with pytest.raises(SourceCodecError, match="prepared for the mesh3d swapper; this node runs mesh"):
        decode_source(data, "mesh")


def _mesh3d_bytes(**entries) -> bytes:
    """A stored mesh3d source whose archive entries are replaced by ``entries``."""
    import io

    from gpu.source_codec import encode_source
    from gpu.swappers.mesh3d import Mesh3dSource
    from gpu.types import Face

    mesh = np.random.default_rng(2).uniform(100, 200, (468, 2)).astype(np.float32)
    face = Face(box=np.array([100, 100, 200, 200], np.float32), kps=mesh[:5], mesh=mesh)
    payload = Mesh3dSource(albedo=np.ones((3, 16, 16), np.float32), lighting=np.zeros((9, 3), np.float32),
                           shape=np.zeros((468, 3), np.float32), photo_texels=3.25)
    data = encode_source("mesh3d", face, np.zeros(128, np.float32), payload)
    with np.load(io.BytesIO(data)) as archive:
        arrays = {name: archive[name] for name in archive.files} | entries
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def test_a_mesh3d_sources_photo_resolution_travels_and_a_forged_one_is_refused():
    """How many texels a pixel of the photo spanned sizes the swap's sharpening on a larger
    face; stored bytes come from the registry, so a value no photo gives is an error."""
    assert decode_source(_mesh3d_bytes(), "mesh3d")[2].photo_texels == pytest.approx(3.25)
    for forged in (np.array(np.nan, np.float32), np.array(-1.0), np.array(1e9), np.array([1.0, 2.0]), np.array("3.0"),
                   np.array(3)):
        with pytest.raises(SourceCodecError, match="damaged: photo_texels"):
            decode_source(_mesh3d_bytes(photo_texels=forged), "mesh3d")


def test_a_mesh_source_survives_bytes(astronaut_image):
    from gpu.engine import EngineSettings, FaceEngine

    engine = FaceEngine(EngineSettings(swapper="mesh"))
    source = engine.register_source(astronaut_image)
    restored = engine.source_from_bytes(engine.source_to_bytes(source))
    np.testing.assert_allclose(restored.payload.texture, source.payload.texture, atol=1 / 510)
    np.testing.assert_array_equal(restored.payload.triangles, source.payload.triangles)
    np.testing.assert_array_equal(restored.payload.points, source.payload.points)
