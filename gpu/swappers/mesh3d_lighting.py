"""Lighting as 9 spherical-harmonic coefficients per colour channel.

Lambertian irradiance is captured by the first three SH bands to about 1 % (Ramamoorthi &
Hanrahan 2001), so a face's colour is albedo x (SH basis of its normal) . coefficients.
Fitting the coefficients on skin texels of one photo separates lighting from albedo: the
source's albedo is then re-lit with the target's coefficients and takes the target's light.

The fit is weighted least squares with a ridge on bands 1-2 (one view sees only half the
sphere of normals, so those bands are poorly determined; band 2 most) and Huber re-weighting (drops
highlights, glasses, stubble and cast shadows the model cannot explain).
"""

from __future__ import annotations

import numpy as np

BANDS = 9
HUBER_K = 1.345  # Huber's constant: 95 % efficiency on Gaussian residuals
HUBER_PASSES = 2
RIDGE = 0.15  # relative to the fit's total weight (the DC basis is 1)
# Band 2 (quadratic) is ridged ten times harder: from one view it is confounded with the
# albedo's own large-scale pattern (darker jaw, rosy cheeks, the rim), and re-lighting with
# it carries the target's appearance over the source's; on the two sample faces it cost
# 0.03 of dlib identity distance, band 1 (the light's direction) almost nothing.
BAND2_RIDGE_FACTOR = 10.0


def sh_basis(normals: np.ndarray) -> np.ndarray:
    """(P, 9) real SH basis (constants folded into the coefficients) of unit normals."""
    x, y, z = normals[:, 0], normals[:, 1], normals[:, 2]
    one = np.ones_like(x)
    return np.stack([one, x, y, z, x * y, x * z, y * z, x * x - y * y, 3.0 * z * z - 1.0], axis=1)


def fit_sh(normals: np.ndarray, colours: np.ndarray, weights: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """(9, C) coefficients so that ``sh_basis(normals) @ coefficients ~ colours`` on
    texels weighted by ``weights`` (0 = not skin or not seen)."""
    basis = sh_basis(normals).astype(np.float64)
    colours = colours.astype(np.float64)
    base = weights.astype(np.float64)
    if base.sum() <= 1e-6:
        raise ValueError("no visible skin to fit the lighting on")
    penalty = np.full(BANDS, ridge * base.sum())
    penalty[0] = 0.0
    penalty[4:] *= BAND2_RIDGE_FACTOR
    robust = np.ones_like(base)
    coefficients = np.zeros((BANDS, colours.shape[1]))
    for step in range(HUBER_PASSES + 1):
        weighted = basis * (base * robust)[:, None]
        coefficients = np.linalg.solve(weighted.T @ basis + np.diag(penalty), weighted.T @ colours)
        if step == HUBER_PASSES:
            break
        # one robust weight per texel, from its worst channel: an outlier (a highlight, a
        # frame of glasses) is one in every channel
        residual = np.abs(colours - basis @ coefficients)
        spread = 1.4826 * np.median(residual[base > 0], axis=0) + 1e-6
        robust = np.minimum(1.0, HUBER_K / np.maximum((residual / spread).max(1), 1e-9))
    return coefficients.astype(np.float32)


def shade(normals: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """(P, C) irradiance of unit normals under SH ``coefficients``."""
    return (sh_basis(normals) @ coefficients).astype(np.float32)
