"""FaceFusion's other processors from the user's models folder: occluder, parser, enhancer,
content gate (one module each). ``Processors`` holds the ones a node loaded.

- occluder (XSeg) and parser (BiSeNet) give per-face keep masks: target pixels that stay;
- the enhancer restores the swapped face (offline jobs and ``swapcast swap`` by default,
  live sessions when enabled);
- the content gate scores source photos and sampled input frames and refuses above a
  threshold.

Each one is optional: a file that is not there means the processor is off; a file that is
there but does not fit is an error naming it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gpu.errors import ModelFileError
from gpu.processors.content_gate import ContentGate
from gpu.processors.enhancer import ENHANCERS, FaceEnhancer
from gpu.processors.masks import CropMask, MaskProcessor, union
from gpu.processors.model import MakeRunner
from gpu.processors.occluder import XsegOccluder
from gpu.processors.parser import DEFAULT_KEEP, BisenetParser, check_regions
from gpu.types import Face

EnhancerUse = Literal["auto", "live", "off"]


@dataclass(frozen=True)
class ProcessorSettings:
    occluder: bool = True  # use xseg_*.onnx when the models folder has one
    parser: bool = True  # use bisenet_resnet_*.onnx when there
    parser_keep: tuple[str, ...] = DEFAULT_KEEP  # parser regions where the target stays
    enhancer: EnhancerUse = "auto"  # auto: offline jobs and `swap`; live: live sessions too; off
    enhancer_model: str = "auto"  # auto = the first of gfpgan_1.4, codeformer, gpen_bfr_512, gpen_bfr_256 found
    enhancer_blend: float = 0.8  # FaceFusion's default 80 %
    enhancer_weight: float = 0.5  # CodeFormer fidelity
    enhancer_live_budget_ms: float = 10.0  # live: a stream whose enhance step takes longer goes on without it
    mask_live_budget_ms: float = 20.0  # live: a stream whose occluder + parser step takes longer goes on without them
    content_gate: bool = True  # use open_nsfw.onnx when there
    content_threshold: float = 0.8
    content_sample_s: float = 1.0  # live and offline streams: one frame per this many seconds


@dataclass
class Processors:
    """The processors this node loaded (``None``: no file, or turned off)."""

    settings: ProcessorSettings = field(default_factory=ProcessorSettings)
    occluder: XsegOccluder | None = None
    parser: BisenetParser | None = None
    enhancer: FaceEnhancer | None = None
    gate: ContentGate | None = None

    @classmethod
    def load(cls, models: Any, settings: ProcessorSettings, make_runner: MakeRunner | None = None,
             **batching) -> Processors:
        """``models`` is the ``UserModels`` found (None: no folder, nothing to load)."""
        check_regions(settings.parser_keep)
        if models is None:
            return cls(settings)
        enhancer = _pick_enhancer(models, settings) if settings.enhancer != "off" else None
        return cls(
            settings,
            occluder=XsegOccluder(models.occluder, make_runner, **batching) if settings.occluder and models.occluder else None,
            parser=(BisenetParser(models.parser, settings.parser_keep, make_runner, **batching)
                    if settings.parser and models.parser else None),
            enhancer=(FaceEnhancer(enhancer, weight=settings.enhancer_weight, make_runner=make_runner, **batching)
                      if enhancer else None),
            gate=(ContentGate(models.content_gate, threshold=settings.content_threshold, make_runner=make_runner,
                              **batching) if settings.content_gate and models.content_gate else None),
        )

    @property
    def loaded(self) -> list[Any]:
        return [p for p in (self.occluder, self.parser, self.enhancer, self.gate) if p is not None]

    @property
    def keep_masks(self) -> tuple[MaskProcessor, ...]:
        """The loaded mask models as the swappers' ``KeepMask`` hooks (``gpu.swappers.base``)."""
        return tuple(p for p in (self.occluder, self.parser) if p is not None)

    def frame_keep_masks(self, frame: np.ndarray, faces: Sequence[Face], session_id: Hashable) -> list[CropMask | None]:
        """Per face of a host frame, where the target stays (occluder and parser together);
        None per face when neither is loaded."""
        keep: list[CropMask | None] = [None] * len(faces)
        for processor in self.keep_masks:
            if faces:
                answers = processor.frame_keep_masks(frame, faces, session_id)
                keep = [union(a, b) for a, b in zip(keep, answers, strict=True)]
        return keep

    def enhance_live(self) -> bool:
        return self.enhancer is not None and self.settings.enhancer == "live"

    def describe(self) -> list[dict[str, Any]]:
        """One entry per loaded processor (doctor, the API's options, the dashboard)."""
        entries = []
        for processor in self.loaded:
            entry: dict[str, Any] = {"kind": processor.kind, "model": processor.path.stem}
            if processor is self.parser:
                entry["keep_regions"] = list(self.parser.keep)
            if processor is self.occluder or processor is self.parser:
                entry["live_budget_ms"] = self.settings.mask_live_budget_ms
            if processor is self.enhancer:
                entry.update(blend=self.settings.enhancer_blend, live=self.enhance_live(), size=self.enhancer.size,
                             live_budget_ms=self.settings.enhancer_live_budget_ms)
                if self.enhancer.weight is not None:
                    entry["weight"] = self.enhancer.weight
            if processor is self.gate:
                entry.update(threshold=self.gate.threshold, sample_s=self.settings.content_sample_s)
            entries.append(entry)
        return entries

    def refusals(self) -> dict[str, int]:
        """The content gate's refusals by where (``source``, ``frame``); empty without a gate."""
        return self.gate.refusals() if self.gate is not None else {}

    def close(self) -> None:
        for processor in self.loaded:
            processor.close()


def _pick_enhancer(models: Any, settings: ProcessorSettings) -> Path | None:
    found = {path.stem: path for path in models.enhancers}
    if settings.enhancer_model == "auto":
        return next((found[stem] for stem in ENHANCERS if stem in found), None)
    if settings.enhancer_model not in ENHANCERS:
        raise ModelFileError(settings.enhancer_model, f"not a known face enhancer (choose from {', '.join(ENHANCERS)})")
    if settings.enhancer_model not in found:
        raise ModelFileError(models.directory, f"enhancer_model {settings.enhancer_model!r} asked for, but "
                                               f"{settings.enhancer_model}.onnx is not there")
    return found[settings.enhancer_model]
