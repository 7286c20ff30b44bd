"""The colour of a source's skin detail, from its lightness, once at registration.

Skin that is darker than the skin around it (a wrinkle, a fold, a pore, a freckle) is
also redder and less blue: light that enters the skin is scattered under it and the blue
is absorbed on the way. In a photo's log-RGB, the fine detail's red chromaticity falls
with its log-lightness by ~0.4-0.5 and its blue rises by as much (regression over the
skin of both sample photos, detail finer than 1/40 of the face's width: red -0.43 and
-0.53, blue +0.58 and +0.45, |r| 0.87-0.94), green in between. A swap that kept the
detail's lightness and smoothed its colour away (the photo's own colour detail carries its
light, its cast or nothing at all for a grey photo) drew wrinkles as grey lines: the face
read dirty, the skin grey. Here the fine detail takes the colour that skin's own detail has
for its darkness; its lightness stays the photo's. Only the fine band gets it (coarser
shading, the eye sockets and the folds, takes the target's colour from the tone transfer:
coloured here too, it moved dlib's distance towards the target on the tune half), and only
on the skin (the eyes, brows and lips have their own colour).
"""

from __future__ import annotations

import cv2
import numpy as np

SHADOW_CHROMA_SLOPE = np.array([-0.42, 0.0, 0.42], np.float32)  # d log-chromaticity (R, G, B) / d log-lightness
DETAIL_SIGMA = 5.6 / 384  # of the texture: the detail coloured is the log-lightness minus its low pass of this sigma
DETAIL_RANGE = (-0.5, 0.5)  # log-lightness: darker or lighter than this is not skin detail (a nostril, a highlight)
SKIN_WEIGHTS = np.array([0.42, 0.31, 0.27], np.float32)  # skin's R, G, B over their sum (the astronaut's cheek): the
# lightness kept is the re-lit skin's, whose red weighs most. Keeping the plain mean instead let red (darkened least)
# carry less of the detail: the swaps' fine detail fell by 4 % (dlib's distance on the tune half: astronaut sources
# 0.4445 -> 0.4415, Grace Hopper's 0.4154 -> 0.4129 with these weights)


def coloured_like_skin(chroma: np.ndarray, luminance: np.ndarray, skin: np.ndarray) -> np.ndarray:
    """``chroma`` (T, T, 3; channels over their mean) with the fine detail of ``luminance``
    (T, T) coloured as skin's detail is, weighted by ``skin`` (T, T) in [0, 1]; each
    texel keeps its lightness as skin weighs the channels (``SKIN_WEIGHTS``)."""
    sigma = DETAIL_SIGMA * luminance.shape[0]
    logs = np.log(np.maximum(luminance, 1e-3)).astype(np.float32)
    support = np.maximum(cv2.GaussianBlur(skin, (0, 0), sigma), 1e-3)
    low = cv2.GaussianBlur(logs * skin, (0, 0), sigma) / support
    detail = np.clip(logs - low, *DETAIL_RANGE) * skin
    tinted = chroma * np.exp(detail[..., None] * SHADOW_CHROMA_SLOPE)
    kept = (chroma * SKIN_WEIGHTS).sum(2, keepdims=True) / np.maximum((tinted * SKIN_WEIGHTS).sum(2, keepdims=True), 1e-6)
    return (tinted * kept).astype(np.float32)
