"""The part of a source photo's light that depends on where on the face, not on which way it faces.

The source's lighting model (second-order spherical harmonics) is a function of the
surface's normal only: it explains the cheek turned to a lamp being brighter than the one
turned away, not a hard side light that falls off across the face (a window beside the
sitter, a lamp close by), where the nose's bridge and the forehead's middle, facing the
camera alike, are lit from bright on one side to dark on the other. Divided by the model,
the albedo kept that ramp: one side of the face dark (the skin test then took it for a
shadow, and the mirrored side was filled in over it in patches: a blotchy face, pale on
the dark side), the other pale. A ramp over the face's image position (its log linear in
x and y) is fitted to the skin's log lightness, robustly (hair, background and shadow
patches, far off it, count for little), and divided out: what stays is the skin's own
lightness and its fine detail. Only a ramp: a quadratic field also took out the darker
sides every face has (they are the target's shading to keep: the share of the target's
low-frequency shading the swap kept fell from 0.81 to 0.77 on the tune half).
"""

from __future__ import annotations

import numpy as np

L1_STEPS = 4  # the robust fit starts as a least-absolute-deviations fit (reweighted): a plain least-squares start
# bent into a dark fringe's corner and the biweight then kept the bend
TUKEY_C = (1.2, 0.8, 0.5, 0.35)  # |log| residual from which a texel no longer counts (biweight's c), per refit
MAX_FIELD = 1.2  # |log| the field's correction is clipped to (x3.3: a hard side light's dark side)
MIN_SKIN = 200  # texels to fit on


def position_light(albedo: np.ndarray, at: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(P,) multiplicative light field over the texels: ``albedo`` (P, 3) as unwrapped and
    divided by the normal-only model, ``at`` (P, 2) the texels' image positions, ``weights``
    (P,) how much each texel counts (plain skin, well seen). The field's weighted mean log
    is 0 over the skin (the face's overall level stays); 1 everywhere when too little skin."""
    counted = weights > 0.05
    if counted.sum() < MIN_SKIN:
        return np.ones(len(albedo), np.float32)
    weights = weights[counted].astype(np.float64)
    centre = (at[counted] * weights[:, None]).sum(0) / weights.sum()
    width = max(float(np.ptp(at[counted, 0])), 1.0)

    def design_at(points: np.ndarray) -> np.ndarray:
        x, y = ((points - centre) / width).T
        return np.stack([np.ones_like(x), x, y], axis=1).astype(np.float64)

    design = design_at(at[counted])
    values = np.log(np.maximum(albedo[counted].mean(1), 1e-3)).astype(np.float64)
    robust = weights.copy()
    for step in range(L1_STEPS + len(TUKEY_C)):
        root = np.sqrt(robust)
        coefficients, *_ = np.linalg.lstsq(design * root[:, None], values * root, rcond=None)
        residual = values - design @ coefficients
        if step < L1_STEPS:
            robust = weights / np.maximum(np.abs(residual), 0.05)
            continue
        reach = TUKEY_C[step - L1_STEPS]
        robust = weights * np.clip(1.0 - (residual / reach) ** 2, 0.0, 1.0) ** 2
        if robust.sum() < 0.2 * weights.sum():  # no consensus: leave the light as it is
            return np.ones(len(albedo), np.float32)
    field = design_at(at) @ coefficients
    field -= (design @ coefficients * robust).sum() / robust.sum()
    return np.exp(np.clip(field, -MAX_FIELD, MAX_FIELD)).astype(np.float32)
