"""Per-session swap options: what the user controls live (page, API, stream keys, CLI)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FaceSelection = Literal["all", "largest", "reference"]
Occlusion = Literal["auto", "objects", "off"]
Eyes = Literal["target", "source"]


@dataclass(frozen=True)
class SwapOptions:
    """How faces are picked and blended. Validated at the edges (config schema, API)."""

    face_selection: FaceSelection = "all"
    reference_threshold: float = 0.6  # dlib distance under which a face is the reference person
    mouth_mask: bool = False  # keep the target's own mouth (lips and inside)
    blend: float = 1.0  # 0 = target untouched, 1 = full swap
    feather: float = 0.06  # mask edge softness, as a fraction of the face crop size
    colour_match: bool = True  # match the swapped skin's colour statistics to the target
    smoothing: bool = True  # temporal smoothing of landmarks (no jitter on a still face)
    eyes: Eyes = "source"  # source: the source's eyes, opened and closed with the target's lids (identity); target: its own eyes (its gaze) in the source's eye shape (mesh3d)
    occlusion: Occlusion = "off"  # auto: what is in front of a face (hand, cup, its own glasses) stays the target's; objects: not its glasses (off by default: docs/guides/occlusion.md)
