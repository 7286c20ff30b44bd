"""FaceFusion processors on generated twins with the real signatures: discovery, signature
refusals, batch equivalence and per-row independence, and what each one does to a frame."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto

from gpu.errors import ModelFileError, SwapcastError
from gpu.models.user_models import UserModels
from gpu.processors import Processors, ProcessorSettings
from gpu.processors.content_gate import ContentGate, ContentRefused
from gpu.processors.enhancer import FaceEnhancer
from gpu.processors.occluder import XsegOccluder
from gpu.processors.parser import BisenetParser
from gpu.types import Face
from model_twins import make_bisenet, make_enhancer, make_open_nsfw, make_xseg
from streamer.samples import astronaut

# Eileen Collins in scikit-image's astronaut (as in test_inswapper.py)
ASTRONAUT = Face(
    box=np.array([173.7, 67.8, 277.6, 171.7], dtype=np.float32),
    kps=np.array([[202.8, 103.5], [248.0, 105.9], [224.0, 132.3], [201.8, 139.5], [245.9, 142.2]], np.float32),
)
# a patch over the mouth and chin, inside the face
PATCH = (slice(132, 150), slice(205, 245))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("processors")
    make_xseg(directory / "xseg_1.onnx")
    make_bisenet(directory / "bisenet_resnet_34.onnx", aux_outputs=2)
    make_enhancer(directory / "gfpgan_1.4.onnx", 512)
    make_enhancer(directory / "codeformer.onnx", 512, weight_input=True)
    make_enhancer(directory / "gpen_bfr_256.onnx", 256)
    make_open_nsfw(directory / "open_nsfw.onnx")
    return directory


@pytest.fixture(scope="module")
def processors(models: Path) -> Processors:
    loaded = Processors.load(UserModels.discover(models), ProcessorSettings())
    yield loaded
    loaded.close()


def _rows_equal_single(runner, feeds: list[dict]) -> None:
    """One batched call equals each row run alone, and different rows give different answers."""
    stacked = {name: np.stack([feed[name] for feed in feeds]) for name in feeds[0]}
    batched = runner.run(stacked)[0]
    for index, feed in enumerate(feeds):
        single = runner.run({name: value[None] for name, value in feed.items()})[0][0]
        np.testing.assert_allclose(batched[index], single, rtol=1e-5, atol=1e-5)
    assert not np.allclose(batched[0], batched[1])


def _faces_frames(count: int = 3) -> list[np.ndarray]:
    base = astronaut()
    return [np.ascontiguousarray(np.roll(base, 7 * i, axis=1) // (i + 1)) for i in range(count)]


def test_discovery_finds_every_processor_by_file_name(models: Path, processors: Processors) -> None:
    found = UserModels.discover(models)
    assert found.occluder.name == "xseg_1.onnx" and found.parser.name == "bisenet_resnet_34.onnx"
    assert [p.name for p in found.enhancers] == ["gfpgan_1.4.onnx", "codeformer.onnx", "gpen_bfr_256.onnx"]
    assert found.content_gate.name == "open_nsfw.onnx"
    kinds = {entry["kind"]: entry for entry in processors.describe()}
    assert kinds["enhancer"]["model"] == "gfpgan_1.4" and kinds["enhancer"]["live"] is False
    assert kinds["parser"]["keep_regions"] == list(ProcessorSettings().parser_keep)
    assert kinds["content_gate"]["threshold"] == 0.8


def test_settings_turn_processors_off_and_pick_an_enhancer(models: Path) -> None:
    found = UserModels.discover(models)
    none = Processors.load(found, ProcessorSettings(occluder=False, parser=False, enhancer="off", content_gate=False))
    assert none.loaded == []
    chosen = Processors.load(found, ProcessorSettings(occluder=False, parser=False, content_gate=False,
                                                      enhancer_model="gpen_bfr_256"))
    assert chosen.enhancer.size == 256
    with pytest.raises(ModelFileError, match="gpen_bfr_512.onnx is not there"):
        Processors.load(found, ProcessorSettings(enhancer_model="gpen_bfr_512"))
    with pytest.raises(SwapcastError, match="unknown face parser region"):
        Processors.load(found, ProcessorSettings(parser_keep=("hands",)))
    assert Processors.load(None, ProcessorSettings()).loaded == []


@pytest.mark.parametrize(
    ("make", "file", "cls", "message"),
    [
        (lambda p: make_xseg(p, input_shape=(1, 3, 256, 256)), "xseg_2.onnx", XsegOccluder,
         r"xseg_2.onnx: input 'input' has shape \[1,3,256,256\], expected \[N,256,256,3\]"),
        (lambda p: make_xseg(p, input_name="image"), "xseg_1.onnx", XsegOccluder,
         r"xseg_1.onnx: has no input 'input' \(inputs: 'image'\)"),
        (lambda p: make_xseg(p, output_shape=(1, 1, 256, 256)), "xseg_3.onnx", XsegOccluder,
         r"output 'mask' has shape \[1,1,256,256\], expected \[N,256,256,1\]"),
        (lambda p: make_bisenet(p, classes=11), "bisenet_resnet_18.onnx", BisenetParser,
         r"bisenet_resnet_18.onnx: output 'output' has shape \[1,11,512,512\], expected \[N,19,512,512\]"),
        (lambda p: make_enhancer(p, 256), "gfpgan_1.4.onnx", FaceEnhancer,
         r"gfpgan_1.4.onnx: input 'input' has shape \[1,3,256,256\], expected \[N,3,512,512\]"),
        (lambda p: make_enhancer(p, 512), "codeformer.onnx", FaceEnhancer,
         r"codeformer.onnx: has 1 inputs \('input'\), expected 2"),
        (lambda p: make_enhancer(p, 512, weight_input=True, weight_type=TensorProto.INT64), "codeformer.onnx",
         FaceEnhancer, r"input 'weight' has type int64, expected float32 or float64"),
        (lambda p: make_enhancer(p, 512), "gpen_bfr_2048.onnx", FaceEnhancer, r"not a known face enhancer"),
        (lambda p: make_open_nsfw(p, classes=5), "open_nsfw.onnx", ContentGate,
         r"open_nsfw.onnx: output 'prob' has shape \[1,5\], expected \[N,2\]"),
        (lambda p: make_open_nsfw(p, input_shape=(1, 299, 299, 3)), "open_nsfw.onnx", ContentGate,
         r"input 'input' has shape \[1,299,299,3\], expected \[N,224,224,3\]"),
        (lambda p: p.write_bytes(b"not a model"), "xseg_1.onnx", XsegOccluder, r"xseg_1.onnx: not an ONNX model"),
    ],
)
def test_wrong_signature_is_one_line_naming_file_and_mismatch(tmp_path: Path, make, file, cls, message) -> None:
    path = tmp_path / file
    make(path)
    with pytest.raises(ModelFileError, match=message) as caught:
        cls(path)
    assert "\n" not in str(caught.value)


def test_wrong_file_in_the_folder_stops_loading_with_its_name(tmp_path: Path) -> None:
    make_bisenet(tmp_path / "bisenet_resnet_34.onnx", input_shape=(1, 3, 448, 448))
    with pytest.raises(ModelFileError, match="bisenet_resnet_34.onnx: input 'input' has shape"):
        Processors.load(UserModels.discover(tmp_path), ProcessorSettings())


def test_every_processor_batches_rows_independently(processors: Processors) -> None:
    frames = _faces_frames()
    for processor in (processors.occluder, processors.parser, processors.enhancer):
        runner = processor.model.runner
        assert runner.inputs[0].shape[0] == "N"  # batch made dynamic
        feeds = [processor.feed(frame, ASTRONAUT)[0] for frame in frames]
        _rows_equal_single(runner, feeds)
    gate = processors.gate
    _rows_equal_single(gate.model.runner, [gate.feed(frame) for frame in frames])


def test_codeformer_weight_is_baked_into_the_graph(models: Path) -> None:
    frame = astronaut()
    outputs = []
    for weight in (0.0, 1.0):
        enhancer = FaceEnhancer(models / "codeformer.onnx", weight=weight)
        assert [spec.name for spec in enhancer.model.runner.inputs] == ["input"]
        outputs.append(enhancer.model.run("t", [enhancer.feed(frame, ASTRONAUT)[0]])[0])
        enhancer.close()
    assert not np.allclose(outputs[0], outputs[1])


def test_occluder_keeps_an_object_over_the_face(processors: Processors) -> None:
    frame = astronaut()
    frame[PATCH] = (20, 40, 230)  # a blue object over mouth and chin
    [keep] = processors.occluder.frame_keep_masks(frame, [ASTRONAUT], "t")
    in_frame = keep.in_frame(frame.shape)
    inner = in_frame[PATCH][4:-4, 4:-4]
    assert inner.min() > 0.95  # the object stays the target's
    cheek = in_frame[108:118, 205:215]
    assert cheek.max() < 0.05  # bare skin is swapped


def test_parser_keeps_chosen_regions_only(models: Path) -> None:
    frame = astronaut()
    frame[100:108, 195:255] = 5  # a dark bar across the eyes: 'glasses' to the twin
    kept = BisenetParser(models / "bisenet_resnet_34.onnx", keep=("glasses",))
    swapped = BisenetParser(models / "bisenet_resnet_34.onnx", keep=("hair",))
    glasses = kept.frame_keep_masks(frame, [ASTRONAUT], "t")[0].in_frame(frame.shape)
    assert glasses[102:106, 205:245].min() > 0.9 and glasses[120:128, 205:245].max() < 0.05
    assert swapped.frame_keep_masks(frame, [ASTRONAUT], "t")[0].in_frame(frame.shape)[102:106, 205:245].max() < 0.05
    kept.close()
    swapped.close()


def test_enhancer_changes_the_face_by_blend_and_spares_kept_pixels(processors: Processors) -> None:
    frame = astronaut()
    frame[PATCH] = (20, 40, 230)
    keep = processors.frame_keep_masks(frame, [ASTRONAUT], "t")
    untouched = frame.copy()
    processors.enhancer.enhance(frame, [ASTRONAUT], "t", blend=0.0)
    assert np.array_equal(frame, untouched)
    processors.enhancer.enhance(frame, [ASTRONAUT], "t", blend=0.8, keep=keep)
    changed = np.abs(frame.astype(int) - untouched).sum(axis=2)
    assert changed[110:125, 200:250].mean() > 3  # the face is restored
    assert changed[PATCH][4:-4, 4:-4].max() <= 2  # the object is not
    assert changed[:40, :40].max() == 0 and changed[300:, 400:].max() == 0  # nor the background


def test_content_gate_refuses_above_threshold_and_counts(models: Path) -> None:
    gate = ContentGate(models / "open_nsfw.onnx", threshold=0.8)
    assert gate.check(astronaut(), "source image", "source") < 0.1
    magenta = np.zeros((300, 200, 3), np.uint8)
    magenta[..., 0] = magenta[..., 2] = 255
    with pytest.raises(ContentRefused, match=r"source image was refused by the content gate \(open_nsfw.onnx score 1.00 > threshold 0.80\)"):
        gate.check(magenta, "source image", "source")
    future = gate.submit(magenta, "live-1")
    assert gate.score_of(future.result(5)) > 0.99
    assert gate.refusals() == {"source": 1}
    gate.close()


def test_mask_models_are_keep_mask_hooks_a_swap_honours(models: Path, processors: Processors, tmp_path: Path) -> None:
    """Through the swappers' KeepMask hook (the inswapper twin's 128 px crop): the answer
    matches the mask made on the whole frame, and the object's pixels survive the swap."""
    from gpu.analysis.arcface import ArcFaceEmbedder
    from gpu.kernels.warp import crop_faces
    from gpu.options import SwapOptions
    from gpu.swappers.base import any_of, run_jobs
    from gpu.swappers.inswapper import InswapperSwapper
    from model_twins import make_arcface, make_inswapper

    swapper = InswapperSwapper(make_inswapper(tmp_path / "inswapper_128.onnx"),
                               ArcFaceEmbedder(make_arcface(tmp_path / "w600k_r50.onnx")))
    frame = astronaut()
    frame[PATCH] = (20, 40, 230)
    original = frame.copy()
    keep = any_of(*processors.keep_masks)
    job = swapper.prepare(frame, ASTRONAUT, np.full(512, 512 ** -0.5, np.float32), SwapOptions(), keep)
    crop = crop_faces([frame], job.matrix[None], 128)[0]
    from_hook = processors.occluder(crop, ASTRONAUT, job.matrix)
    from_frame = processors.occluder.frame_keep_masks(frame, [ASTRONAUT], "t")[0].in_crop(job.matrix, 128)
    assert from_hook.shape == (128, 128) and np.abs(from_hook - from_frame)[16:-16, 16:-16].mean() < 0.02
    [row] = run_jobs(swapper.runner, [job])
    swapper.finish(frame, job, row)
    patch_kept = np.all(frame[PATCH] == original[PATCH], axis=2)[3:-3, 3:-3]
    assert patch_kept.mean() >= 0.95
    assert np.abs(frame[108:118, 205:215].astype(int) - original[108:118, 205:215]).mean() > 5  # skin swapped


def test_doctor_says_what_each_processor_does(processors: Processors) -> None:
    from swapcast.commands.doctor import processor_lines

    lines = "\n".join(processor_lines(processors.describe()))
    assert "occluder      xseg_1: what covers a face stays the target's" in lines
    assert "enhancer      gfpgan_1.4: 512 px, blend 0.8; offline jobs and swap" in lines
    assert "content_gate  open_nsfw: refuses above 0.8" in lines
    assert processor_lines([]) == ["processors    none (no occluder, parser, enhancer or content gate file in the models folder)"]


def test_rows_of_concurrent_streams_share_a_batch_and_keep_their_own_answers(models: Path) -> None:
    import threading

    occluder = XsegOccluder(models / "xseg_1.onnx", max_queue_delay_ms=200.0)
    frames = _faces_frames(2)
    alone = [occluder.frame_keep_masks(frame, [ASTRONAUT], f"s{i}")[0].mask for i, frame in enumerate(frames)]
    batcher = occluder.model.batcher
    batcher.reset_metrics()
    for index in range(2):  # two live streams: neither is alone, so their rows wait for a batch
        batcher.attach(f"s{index}")
    together: dict[int, np.ndarray] = {}
    start = threading.Barrier(2)

    def stream(index: int) -> None:
        start.wait()
        together[index] = occluder.frame_keep_masks(frames[index], [ASTRONAUT], f"s{index}")[0].mask

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    for index in range(2):
        np.testing.assert_allclose(together[index], alone[index], atol=1e-5)
    assert not np.allclose(together[0], together[1])
    assert occluder.model.metrics()["batch_size_histogram"] == {"2": 1}
    occluder.close()


def test_config_section_reaches_the_engine_and_refuses_unknown_regions() -> None:
    from swapcast.config import ConfigError, load_config

    config = load_config(environ={"SWAPCAST_ENGINE__PROCESSORS__ENHANCER": "live",
                                  "SWAPCAST_ENGINE__PROCESSORS__PARSER_KEEP": "[glasses, hair]"})
    settings = config.engine.settings().processors
    assert settings.enhancer == "live" and settings.parser_keep == ("glasses", "hair")
    with pytest.raises(ConfigError, match="unknown region\\(s\\) hands"):
        load_config(environ={"SWAPCAST_ENGINE__PROCESSORS__PARSER_KEEP": "[hands]"})


def test_a_live_budget_drops_a_step_once_its_median_goes_over() -> None:
    from gpu.processors.budget import WINDOW, BudgetedKeepMasks, LiveBudget

    with pytest.raises(ValueError, match="must be positive"):
        LiveBudget("enhancer", 0.0, "s")
    budget = LiveBudget("enhancer", 10.0, "s")
    for ms in [50.0] * (WINDOW // 2 - 1) + [1.0] * (WINDOW // 2 + 1):  # a few slow frames: the median fits
        budget.record(ms)
    assert budget.affordable
    for ms in [50.0] * (WINDOW // 2 + 1):
        budget.record(ms)
    assert not budget.affordable
    budget.record(0.0)
    assert not budget.affordable  # dropped for good

    answers = []
    masks = BudgetedKeepMasks((lambda crop, face, matrix: answers.append(1) or np.ones((4, 4), np.float32),),
                              LiveBudget("mask models", 1e-6, "s"))
    crop = np.zeros((4, 4, 3), np.uint8)
    for _ in range(WINDOW):
        (hook,) = masks.hooks()
        assert hook(crop, None, None).sum() == 16
        masks.frame_done()
    assert masks.hooks() == () and len(answers) == WINDOW
    assert BudgetedKeepMasks((), LiveBudget("mask models", 1.0, "s")).hooks() == ()
