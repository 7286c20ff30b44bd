"""A source photo's colour channels where they hold no picture of the face, once at registration.

A strong colour cast or a dark, warm photo crushes a channel to black (tungsten or sodium
light's blue), an overexposed one clips it white (a brightly lit face's red). There that
channel's albedo (its colour over the light fitted to it) is quantisation noise, or flat,
and every swap drew it: a yellow face with blue eyes and red blotches, a grey-blue face
with blue lips. Each channel of each texel counts by how far it is from black and from
white; what it lacks comes from the channels that hold there, mostly the nearest in
wavelength (each is relative to its own skin, as a grey photo's three equal channels are;
skin's blue follows its green, not its red: blue taken from the mean of red and green drew
red lids and lips purple). The skin's colour is the target's anyway (the tone transfer); a
source gives its detail and shape.
"""

from __future__ import annotations

import numpy as np

DARK_LEVEL = (0.02, 0.08)  # a channel's value (0-1) below which it starts to / wholly stops counting (8-bit steps
# are a tenth of the signal at the first)
CLIPPED_LEVEL = (0.95, 0.99)  # ... and above which, towards clipped white
STAND_IN = np.array([[0.0, 1.0, 0.25],  # red's detail taken from green, a little from blue
                     [0.5, 0.0, 0.5],  # green's from red and blue alike
                     [0.25, 1.0, 0.0]], np.float32)  # blue's from green, a little from red
STAND_IN_CONTRAST = np.array([0.6, 1.0, 1.0], np.float32)  # of the stand-ins' detail (log) each channel takes: skin's
# red is its smoothest channel (light scatters under the skin), and green's detail in its place drew a clipped-red
# face's wrinkles and blotches dark and dirty


def channel_reliability(colours: np.ndarray) -> np.ndarray:
    """(..., 3) in [0, 1]: how much each channel of each of a photo's ``colours`` (..., 3)
    in [0, 1] holds a picture: 0 crushed to black or clipped white."""
    dark = np.clip((colours - DARK_LEVEL[0]) / (DARK_LEVEL[1] - DARK_LEVEL[0]), 0.0, 1.0)
    clipped = np.clip((colours - CLIPPED_LEVEL[0]) / (CLIPPED_LEVEL[1] - CLIPPED_LEVEL[0]), 0.0, 1.0)
    return (dark * (1.0 - clipped)).astype(np.float32)


def from_reliable_channels(values: np.ndarray, reliability: np.ndarray) -> np.ndarray:
    """``values`` (..., 3) per channel (an albedo, each channel relative to its own skin;
    or the light fitted per channel) with what an unreliable channel lacks taken from the
    reliable ones (``STAND_IN``); ``reliability`` broadcasts against ``values``. Where no
    other channel holds (a black background, blown-out white) the values stay as they are."""
    reliability = np.broadcast_to(reliability, values.shape).astype(np.float32)
    if float(reliability.min()) >= 1.0:
        return values
    stand_in, trust = _stand_in(values, reliability)
    return (values * trust + stand_in * (1.0 - trust)).astype(values.dtype)


def albedo_from_reliable_channels(albedo: np.ndarray, reliability: np.ndarray) -> np.ndarray:
    """``from_reliable_channels`` for an albedo (> 0, each channel relative to its own skin):
    the stand-ins' detail taken in log units, at each channel's ``STAND_IN_CONTRAST``."""
    reliability = np.broadcast_to(reliability, albedo.shape).astype(np.float32)
    if float(reliability.min()) >= 1.0:
        return albedo
    logs = np.log(np.maximum(albedo, 1e-3))
    stand_in, trust = _stand_in(logs, reliability)
    return np.exp(logs * trust + stand_in * STAND_IN_CONTRAST * (1.0 - trust)).astype(albedo.dtype)


def _stand_in(values: np.ndarray, reliability: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(what stands in for each channel, how much each keeps its own): where none of its
    stand-ins holds, a channel keeps its own, however poor."""
    support = reliability @ STAND_IN.T
    stand_in = (values * reliability) @ STAND_IN.T / np.maximum(support, 1e-6)
    return stand_in, np.maximum(reliability, 1.0 - np.clip(support / 0.5, 0.0, 1.0))
