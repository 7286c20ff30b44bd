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
    np.testing.assert_allclose(restored.payload.texture, source.payload.texture, atol=1 / 510)
    np.testing.assert_array_equal(restored.payload.triangles, source.payload.triangles)
    swapped = []
    for which in (source, restored):
        frame = grace_image.copy()
        assert FrameSwapper(engine, which).process_still(frame).faces_swapped == 1
        swapped.append(frame.astype(int))
    assert np.abs(swapped[0] - swapped[1]).max() <= 2


def test_damaged_or_foreign_bytes_say_why(engine, astronaut_image):
    with pytest.raises(SourceCodecError, match="damaged"):
        engine.source_from_bytes(b"not an archive")
    data = engine.source_to_bytes(engine.register_source(astronaut_image))
    with pytest.raises(SourceCodecError, match="prepared for the mesh swapper; this node runs inswapper"):
        decode_source(data, "inswapper")
