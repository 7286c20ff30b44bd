"""Several photos of one person as one source face.

Registered sources of the same person (``FaceEngine.register_source`` on each photo) are
merged into one ``SourceFace``: its identity descriptor is the mean of theirs (renormalised
to the length of a descriptor, so distances keep their scale), and the swapper's own data
merged as that swapper allows:

- ``mesh3d``: the UV albedos averaged per texel by how well each photo saw it and how much
  it is skin there, the shapes per vertex likewise (``gpu.swappers.mesh3d.merge_sources``);
  a left and a right profile fill each other's far side;
- ``inswapper``: the mean of the projected identity latents, renormalised;
- ``mesh`` (a 2D texture cut from one photo): the most frontal photo's texture, since
  textures of different views cannot be averaged in 2D.

One source comes back as it is, so single-photo faces work as before."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpu.engine import SourceFace


def merge_source_faces(swapper: str, sources: Sequence[SourceFace]) -> SourceFace:
    """One ``SourceFace`` from several of the same person, all registered by ``swapper``."""
    if not sources:
        raise ValueError("no source faces to merge")
    if len(sources) == 1:
        return sources[0]
    identity = mean_identity([s.identity for s in sources])
    frontal = max(range(len(sources)), key=lambda i: _frontality(sources[i]))
    if swapper == "mesh3d":
        from gpu.swappers.mesh3d import merge_sources

        payload = merge_sources([s.payload for s in sources])
    elif swapper == "mesh":
        payload = sources[frontal].payload
    else:  # inswapper: one latent per source
        payload = _mean_direction(np.stack([np.asarray(s.payload, np.float32).reshape(-1) for s in sources]))
        payload = payload.reshape(np.asarray(sources[0].payload).shape)
    return SourceFace(face=sources[frontal].face, identity=identity, payload=payload)


def mean_identity(identities: Sequence[np.ndarray]) -> np.ndarray:
    """The identity several photos of one person share: their descriptors' mean direction
    at their mean length (what a merged source carries, and what another photo is checked
    to be the same person against)."""
    return _mean_direction(np.stack([np.asarray(i, np.float32).reshape(-1) for i in identities]))


def _mean_direction(vectors: np.ndarray) -> np.ndarray:
    """The mean of row vectors, scaled to their mean length."""
    mean = vectors.mean(0)
    length = float(np.linalg.norm(vectors, axis=1).mean())
    return (mean / max(float(np.linalg.norm(mean)), 1e-9) * length).astype(np.float32)


def _frontality(source: SourceFace) -> float:
    """How frontal a source face is: its nose tip's distance from the eyes' midline, over
    the eye distance, negated (0 = frontal)."""
    kps = source.face.kps
    eyes = (kps[0] + kps[1]) / 2
    span = max(float(np.linalg.norm(kps[1] - kps[0])), 1e-6)
    return -abs(float(kps[2, 0] - eyes[0])) / span
