"""The vendored canonical face mesh: what the 3D-aware swapper relies on it being."""

from importlib import resources

import numpy as np
import pytest

from gpu.models.canonical_mesh import (
    DATA_FILE,
    INNER_LIP_CONTOUR,
    LEFT_EYE_CONTOUR,
    RIGHT_EYE_CONTOUR,
    canonical_mesh,
    parse_canonical_mesh,
    signed_areas,
)


def test_the_data_ships_in_the_package_with_its_licence_header():
    text = resources.files("gpu.models").joinpath("data", DATA_FILE).read_text()
    assert "Copyright 2020 The MediaPipe Authors" in text and "Apache License, Version 2.0" in text


def test_mesh_facts():
    mesh = canonical_mesh()
    assert mesh.vertices.shape == (468, 3) and mesh.uv.shape == (468, 2)
    assert mesh.triangles.shape == (898, 3) and mesh.triangles.min() == 0 and mesh.triangles.max() == 467
    assert len(mesh.procrustes_ids) == len(mesh.procrustes_weights) == 33
    assert (mesh.uv >= 0).all() and (mesh.uv <= 1).all()
    # v grows downward like image rows: the forehead (10) is above the chin (152)
    assert mesh.uv[10, 1] < mesh.uv[152, 1] and mesh.vertices[10, 1] < mesh.vertices[152, 1]
    # the nose tip (1) is nearer the camera (smaller z) than the cheeks' edge (234)
    assert mesh.vertices[1, 2] < mesh.vertices[234, 2]


def test_mesh_is_mirror_symmetric_in_space_and_in_uv():
    mesh = canonical_mesh()
    mirrored = mesh.vertices[mesh.mirror] * np.array([-1, 1, 1])
    np.testing.assert_allclose(mirrored, mesh.vertices, atol=1e-5)
    assert (mesh.mirror[mesh.mirror] == np.arange(468)).all()
    assert (mesh.mirror == np.arange(468)).sum() == 28  # the midline
    # mirroring a UV texture is a horizontal flip
    np.testing.assert_allclose(mesh.uv[mesh.mirror, 0], 1 - mesh.uv[:, 0], atol=0.002)
    np.testing.assert_allclose(mesh.uv[mesh.mirror, 1], mesh.uv[:, 1], atol=0.002)


def test_frontal_triangles_face_the_camera_and_openings_close():
    mesh = canonical_mesh()
    assert (signed_areas(mesh.vertices, mesh.triangles) < 0).mean() > 0.95
    assert mesh.eye_closure.sum() == 28 and mesh.mouth_closure.sum() == 18
    closing = mesh.triangles[mesh.closure]
    assert np.isin(closing, RIGHT_EYE_CONTOUR + LEFT_EYE_CONTOUR + INNER_LIP_CONTOUR).all()


def test_a_damaged_file_is_refused():
    with pytest.raises(ValueError, match="468 VERTEX_PT"):
        parse_canonical_mesh("canonical_mesh: { vertex_buffer: 1.0 index_buffer: 0 }")
