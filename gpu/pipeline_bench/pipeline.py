"""One frame tick of N sessions through every stage (see ``stages``), batched or one
session at a time, on the device the node computes with.

The decoded frames wait in host memory (pinned on CUDA, as a decoder's output buffers
would be) and are uploaded each tick; the encoder's YUV goes back to host memory. A node
with NVDEC/NVENC skips both copies: the report keeps them as stages of their own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpu.kernels import ops
from gpu.pipeline_bench.scene import SceneRing
from gpu.pipeline_bench.stages import InswapperStage, Mesh3dStage, StageClock, Track, Tracking

Swap = InswapperStage | Mesh3dStage


def host_rings(rings: Sequence[SceneRing], cuda: bool) -> list[Any]:
    """The rings' I420 frames where a decoder leaves them: pinned host memory on CUDA (each
    upload is then one asynchronous DMA), plain NumPy on the CPU. Made once per run."""
    if not cuda:
        return [ring.i420 for ring in rings]
    import cupyx

    pinned = []
    for ring in rings:
        buffer = cupyx.empty_pinned(ring.i420.shape, np.uint8)
        buffer[...] = ring.i420
        pinned.append(buffer)
    return pinned


class NodeTick:
    """``sessions`` single-face sessions; session ``s`` plays ring ``s % len(rings)`` (see
    ``host_rings``) from its own phase. ``layout`` is the encoder's: ``"i420"`` or ``"nv12"``."""

    def __init__(self, rings: Sequence[Any], truth: Sequence[np.ndarray], sessions: int, tracking: Tracking, swap: Swap,
                 cuda: bool, layout: str = "i420") -> None:
        self.truth = truth  # per ring, (F, 4) true face boxes
        self.host_rings, self.sessions, self.tracking, self.swap, self.cuda, self.layout = rings, sessions, tracking, swap, cuda, layout
        count, rows, width = rings[0].shape
        self.ring_frames = count
        self.phases = [(7 * s) % count for s in range(sessions)]
        self.clock = StageClock(cuda)
        self.tracks = [Track() for _ in range(sessions)]
        if cuda:
            import cupy
            import cupyx

            self.xp = cupy
            self.host_out = cupyx.empty_pinned((sessions, rows, width), np.uint8)
        else:
            self.xp = np
            self.host_out = np.empty((sessions, rows, width), np.uint8)
        self.yuv_in = self.xp.empty((sessions, rows, width), np.uint8)
        self.faces_swapped = 0

    def reset(self) -> None:
        """Forget every track: the next tick detects in every session."""
        self.tracks = [Track() for _ in range(self.sessions)]
        self.faces_swapped = 0

    def tracking_iou(self, tick: int) -> float | None:
        """Mean IoU of each tracked face's mesh bounds with where its face truly was at
        ``tick`` (the last tick run): the tracker follows the faces, not just "a face"."""
        scores = []
        for session, track in enumerate(self.tracks):
            if track.mesh is None:
                continue
            truth = self.truth[session % len(self.truth)][(tick + self.phases[session]) % self.ring_frames]
            found = np.concatenate([track.mesh[:, :2].min(0), track.mesh[:, :2].max(0)])
            low, high = np.maximum(truth[:2], found[:2]), np.minimum(truth[2:], found[2:])
            inter = float(np.prod(np.clip(high - low, 0, None)))
            union = float(np.prod(truth[2:] - truth[:2]) + np.prod(found[2:] - found[:2])) - inter
            scores.append(inter / union if union > 0 else 0.0)
        return round(float(np.mean(scores)), 3) if scores else None

    def _source(self, session: int, tick: int) -> Any:
        ring = self.host_rings[session % len(self.host_rings)]
        return ring[(tick + self.phases[session]) % self.ring_frames]

    def _upload(self, session: int, tick: int) -> None:
        if self.cuda:
            self.yuv_in[session].set(self._source(session, tick))
        else:
            np.copyto(self.yuv_in[session], self._source(session, tick))

    def _download(self, session: int, out: Any) -> None:
        if self.cuda:
            out.get(out=self.host_out[session], blocking=False)
        else:
            np.copyto(self.host_out[session], out)

    def run(self, tick: int, batched: bool) -> None:
        """One frame of every session, through every stage; returns once the device is done."""
        self.clock.events = self.cuda and batched
        self.clock.begin()
        if batched:
            self._batched(tick)
        else:
            for session in range(self.sessions):
                self._one(tick, session)
        self.synchronize()

    def synchronize(self) -> None:
        if self.cuda:
            import cupy

            cupy.cuda.runtime.deviceSynchronize()

    def _batched(self, tick: int) -> None:
        clock, everyone = self.clock, range(self.sessions)
        for session in everyone:
            self._upload(session, tick)
        clock.mark("upload")
        rgb = ops.yuv_to_rgb(self.yuv_in, "i420")
        frames = list(rgb)
        clock.mark("yuv_to_rgb")
        detected = self.tracking.detect(frames, self.tracking.due(tick, everyone, self.tracks))
        clock.mark("detect")
        faces = self.tracking.landmarks(frames, everyone, self.tracks, detected)
        clock.mark("landmarks")
        self.swap.swap(frames, faces, clock)
        self.faces_swapped += len(faces)
        out = ops.rgb_to_yuv(rgb, self.layout)
        clock.mark("rgb_to_yuv")
        if self.cuda:
            out.get(out=self.host_out, blocking=False)
        else:
            np.copyto(self.host_out, out)
        clock.mark("download")

    def _one(self, tick: int, session: int) -> None:
        clock = self.clock
        self._upload(session, tick)
        clock.mark("upload")
        rgb = ops.yuv_to_rgb(self.yuv_in[session], "i420")
        frames = {session: rgb}
        clock.mark("yuv_to_rgb")
        detected = self.tracking.detect(frames, self.tracking.due(tick, [session], self.tracks))
        clock.mark("detect")
        faces = self.tracking.landmarks(frames, [session], self.tracks, detected)
        clock.mark("landmarks")
        self.swap.swap(frames, faces, clock)
        self.faces_swapped += len(faces)
        out = ops.rgb_to_yuv(rgb, self.layout)
        clock.mark("rgb_to_yuv")
        self._download(session, out)
        clock.mark("download")
