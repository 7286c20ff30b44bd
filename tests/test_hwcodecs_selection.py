"""live.video_encoder / live.video_decoder: which H.264 codec a live stream opens, and the
fall back to software when NVENC / NVDEC cannot open or fail.

The choice is tested with a stubbed probe; the fall back for real on this machine, where
PyAV lists h264_nvenc / h264_cuvid but opening them fails (no NVIDIA driver)."""

from __future__ import annotations

import asyncio
import fractions
import logging
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import av
import numpy as np
import pytest

from gpu.errors import SwapcastError
from streamer.live.h264 import H264Decoder, H264Encoder
from streamer.live.swap_worker import EncoderSettings, LiveSwapWorker, SequenceHeader, VideoSample
from streamer.media import hwcodecs
from streamer.media.hwcodecs import (
    CodecChoice,
    CodecStatus,
    HardwareCodecs,
    HardwareCodecUnavailableError,
    choose_video_decoder,
    choose_video_encoder,
)
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.rtmp.flv import avcc_to_annexb, split_annexb
from streamer.samples import grace_hopper, moving_face_frames
from streamer.webrtc import encoders
from swapcast.config import LiveConfig, WebRtcConfig, load_config
from swapcast.local_cluster import free_port

NVENC_OK = CodecStatus("h264_nvenc", True, "opened and encoded a test frame")
NVDEC_OK = CodecStatus("h264_cuvid", True, "opened a decoder context")
NVENC_BROKEN = CodecStatus("h264_nvenc", False, "listed, but opening it failed (PermissionError: no driver)")
NVDEC_BROKEN = CodecStatus("h264_cuvid", False, "listed, but opening it failed (PermissionError: no driver)")
PYNV = CodecStatus("PyNvVideoCodec", False, "not installed")
FORCED_NVENC = CodecChoice("h264_nvenc", True, "forced by the test")
FORCED_NVDEC = CodecChoice("h264_cuvid", True, "forced by the test")


def _probes(monkeypatch, nvenc: CodecStatus, nvdec: CodecStatus) -> None:
    monkeypatch.setattr(hwcodecs, "nvenc_status", lambda: nvenc)
    monkeypatch.setattr(hwcodecs, "nvdec_status", lambda: nvdec)


def _no_probing(monkeypatch) -> None:
    def probe():
        raise AssertionError("software must never probe")

    monkeypatch.setattr(hwcodecs, "nvenc_status", probe)
    monkeypatch.setattr(hwcodecs, "nvdec_status", probe)


def _hardware_listed_but_unusable(name: str) -> None:
    """The real fall back needs a codec that is listed (the probe's hardware choice names
    one) and does not open; on a machine where it works there is nothing to fall back from."""
    if name not in av.codecs_available:
        pytest.skip(f"this PyAV has no {name}")
    status = hwcodecs.nvenc_status() if name == hwcodecs.ENCODER else hwcodecs.nvdec_status()
    if status.usable:
        pytest.skip(f"{name} opens on this machine")


# ------------------------------------------------------------------ the choice


def test_auto_takes_the_hardware_codecs_when_the_probe_opens_them(monkeypatch):
    _probes(monkeypatch, NVENC_OK, NVDEC_OK)
    encoder, decoder = choose_video_encoder("auto"), choose_video_decoder("auto")
    assert (encoder.name, encoder.hardware) == ("h264_nvenc", True) and "opened and encoded" in encoder.reason
    assert (decoder.name, decoder.hardware) == ("h264_cuvid", True)
    assert choose_video_encoder("nvenc").hardware and choose_video_decoder("nvdec").hardware


def test_auto_without_usable_hardware_is_software_with_the_probes_reason(monkeypatch):
    _probes(monkeypatch, NVENC_BROKEN, NVDEC_BROKEN)
    encoder, decoder = choose_video_encoder("auto"), choose_video_decoder("auto")
    assert (encoder.name, encoder.hardware) == ("libx264", False)
    assert (decoder.name, decoder.hardware) == ("h264", False)
    assert "PermissionError: no driver" in encoder.reason and "h264_nvenc not usable" in encoder.reason
    assert "PermissionError: no driver" in decoder.reason


def test_explicit_hardware_that_cannot_open_is_an_error_naming_the_reason(monkeypatch):
    _probes(monkeypatch, NVENC_BROKEN, NVDEC_BROKEN)
    with pytest.raises(HardwareCodecUnavailableError, match=r"video_encoder 'nvenc'.*PermissionError: no driver"):
        choose_video_encoder("nvenc")
    with pytest.raises(HardwareCodecUnavailableError, match=r"video_decoder 'nvdec'.*PermissionError: no driver"):
        choose_video_decoder("nvdec")
    assert issubclass(HardwareCodecUnavailableError, SwapcastError)  # the CLI reports it, exit 2
    with pytest.raises(SwapcastError, match="auto, software or nvenc"):
        choose_video_encoder("nvdec")


def test_software_never_probes(monkeypatch):
    _no_probing(monkeypatch)
    assert choose_video_encoder("software") == CodecChoice("libx264", False, "live.video_encoder=software")
    assert choose_video_decoder("software").name == "h264"
    tuning = encoders.EncoderTuning.from_config(WebRtcConfig(), LiveConfig(video_encoder="software"))
    assert tuning.h264_encoder.name == "libx264"
    assert encoders.EncoderTuning.from_config(WebRtcConfig()).h264_encoder.name == "libx264"  # no live section


def test_the_probe_runs_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(hwcodecs, "probe_nvenc", lambda: calls.append(1) or NVENC_BROKEN)
    hwcodecs.nvenc_status.cache_clear()
    try:
        assert choose_video_encoder("auto").name == "libx264"
        assert choose_video_encoder("auto").name == "libx264"
        hwcodecs.detect_hardware_codecs()
        assert calls == [1]
    finally:
        hwcodecs.nvenc_status.cache_clear()


def test_config_defaults_and_validation():
    live = LiveConfig()
    assert (live.video_encoder, live.video_decoder) == ("auto", "auto")
    with pytest.raises(SwapcastError, match="live.video_encoder"):
        load_config(environ={"SWAPCAST_LIVE__VIDEO_ENCODER": "vaapi"})


# ------------------------------------------------------------------ the fall back, for real


def _frames(count: int, size=(640, 480)) -> list[np.ndarray]:
    return moving_face_frames(grace_hopper(), count, size)


def _nal_types(sample: bytes) -> set[int]:
    return {unit[0] & 0x1F for unit in split_annexb(avcc_to_annexb(sample))}


def test_h264_encoder_with_nvenc_forced_falls_back_to_x264_and_encodes(caplog):
    _hardware_listed_but_unusable("h264_nvenc")
    with caplog.at_level(logging.WARNING, logger="streamer.media.hwcodecs"):
        encoder = H264Encoder(640, 480, bitrate_kbps=1500, codec=FORCED_NVENC)
    assert [r.getMessage() for r in caplog.records] == [f"a live stream's {encoder.fallback_reason}"]  # one warning
    assert encoder.codec_name == "libx264"
    assert "h264_nvenc failed" in encoder.fallback_reason and "PermissionError" in encoder.fallback_reason
    assert "ArgumentError" not in encoder.fallback_reason  # the NVENC options parse: only the driver is missing
    packets = [p for i, frame in enumerate(_frames(5)) for p in encoder.encode(frame, i * 33)]
    assert len(packets) == 5 and packets[0].keyframe and 5 in _nal_types(packets[0].data)  # an IDR slice
    assert encoder.sequence_header is not None and encoder.sequence_header[0] == 1  # avcC version 1


def test_h264_decoder_with_cuvid_forced_falls_back_and_decodes_the_encoders_output():
    _hardware_listed_but_unusable("h264_cuvid")
    encoder = H264Encoder(640, 480, bitrate_kbps=1500)
    packets = [p for i, frame in enumerate(_frames(5)) for p in encoder.encode(frame, i * 33)]
    decoder = H264Decoder(FORCED_NVDEC)
    decoder.configure(encoder.sequence_header)
    assert decoder.codec_name == "h264" and "h264_cuvid failed" in decoder.fallback_reason
    assert "ArgumentError" not in decoder.fallback_reason
    decoded = [f for p in packets for f in decoder.decode(p.data, p.dts)]
    assert [(f.width, f.height) for f in decoded] == [(640, 480)] * 5
    assert [f.pts for f in decoded] == [p.pts for p in packets]


class _LostDevice:
    """A codec context whose device went away mid-stream (as NVENC/cuvid report it)."""

    def __init__(self, width: int, height: int, bit_rate: int, error: Exception) -> None:
        self.width, self.height, self.bit_rate, self.error = width, height, bit_rate, error

    def encode(self, frame):
        raise self.error

    def decode(self, packet):
        raise self.error


LOST = av.error.ExternalError(-542398533, "Generic error in an external library")


def test_encoder_failing_mid_stream_goes_on_in_software_from_the_failed_frame():
    frames = _frames(6, (320, 240))
    encoder = H264Encoder(320, 240, keyframe_interval_s=10.0)
    assert len([p for i, frame in enumerate(frames[:3]) for p in encoder.encode(frame, i * 33)]) == 3
    encoder.codec_choice = FORCED_NVENC  # as if NVENC had been encoding this stream ...
    encoder._context = _LostDevice(320, 240, 2_500_000, LOST)  # ... and its device went away
    after = [p for i, frame in enumerate(frames[3:], 3) for p in encoder.encode(frame, i * 33)]
    assert encoder.codec_name == "libx264" and "ExternalError" in encoder.fallback_reason
    assert [p.pts for p in after] == [99, 132, 165]  # no frame lost, the failed one included
    assert after[0].keyframe and not after[1].keyframe  # the new encoder starts on a keyframe
    decoder = H264Decoder()
    decoder.configure(encoder.sequence_header)
    assert len([f for p in after for f in decoder.decode(p.data, p.dts)]) == 3


def test_decoder_failing_mid_stream_goes_on_in_software_but_bad_data_is_not_a_device_failure():
    encoder = H264Encoder(320, 240)
    packet = encoder.encode(_frames(1, (320, 240))[0], 0)[0]
    decoder = H264Decoder()
    decoder.configure(encoder.sequence_header)
    decoder.codec_choice, decoder._context = FORCED_NVDEC, _LostDevice(320, 240, 0, LOST)
    frames = decoder.decode(packet.data, packet.dts)
    assert decoder.codec_name == "h264" and "ExternalError" in decoder.fallback_reason
    assert [(f.width, f.height) for f in frames] == [(320, 240)]
    damaged = av.error.InvalidDataError(-1094995529, "Invalid data found when processing input")
    decoder.codec_choice, decoder._context = FORCED_NVDEC, _LostDevice(320, 240, 0, damaged)
    with pytest.raises(av.error.InvalidDataError):
        decoder.decode(packet.data, packet.dts)
    assert decoder.codec_name == "h264_cuvid"  # a damaged sample is the stream's fault: no fall back


def _video_frames(count: int, size=(640, 480)) -> list[av.VideoFrame]:
    out = []
    for index, rgb in enumerate(_frames(count, size)):
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p")
        frame.pts, frame.time_base = index * 3000, fractions.Fraction(1, 90000)
        out.append(frame)
    return out


@pytest.fixture
def nvenc_tuning():
    before = encoders.current_tuning()
    encoders.install(encoders.EncoderTuning(h264_encoder=FORCED_NVENC))
    yield
    encoders.install(before)


def test_webrtc_h264_encoder_with_nvenc_forced_falls_back_to_x264(nvenc_tuning):
    _hardware_listed_but_unusable("h264_nvenc")
    encoder = encoders.RealtimeH264Encoder()
    assert encoder.codec_name == "h264_nvenc"  # nothing opens before the first frame
    video = _video_frames(4)
    payloads, timestamp = encoder.encode(video[0], force_keyframe=True)
    assert payloads and timestamp == 0
    assert encoder.codec_name == "libx264" and encoder.codec.name == "libx264"
    assert "PermissionError" in encoder.fallback_reason and "ArgumentError" not in encoder.fallback_reason
    assert encoder.applied_options["tune"] == "zerolatency"
    assert all(encoder.encode(frame)[0] for frame in video[1:])
    encoder.target_bitrate = 3_000_000  # a new context (bitrate moved > 10 %): the stream stays on x264
    assert encoder.encode(video[0])[0] and encoder.codec.name == "libx264"


def test_webrtc_h264_encoder_failing_mid_stream_resends_a_keyframe_in_software():
    video = _video_frames(3)
    encoder = encoders.RealtimeH264Encoder()
    assert encoder.encode(video[0], force_keyframe=True)[0]
    encoder.codec_choice = FORCED_NVENC
    encoder.codec = _LostDevice(640, 480, encoder.target_bitrate, LOST)
    payloads, _ = encoder.encode(video[1])
    assert payloads and encoder.codec.name == "libx264" and "ExternalError" in encoder.fallback_reason
    nal_types = {payload[0] & 0x1F for payload in payloads}
    assert nal_types & {24, 7}  # the keyframe opens with SPS/PPS (alone or in a STAP-A)


def test_nvenc_options_ask_for_low_latency_baseline_output(monkeypatch, nvenc_tuning):
    opened = []

    class Recording:  # a codec context that records what NVENC would open with
        def __init__(self, name: str, mode: str) -> None:
            self.name, self.options = name, {}

        def open(self) -> None:
            opened.append((self.name, dict(self.options)))

    monkeypatch.setattr(encoders, "av", SimpleNamespace(CodecContext=SimpleNamespace(create=Recording), error=av.error))
    encoders.RealtimeH264Encoder()._open(_video_frames(1)[0])
    name, options = opened[0]
    assert name == "h264_nvenc"
    assert options["profile"] == "baseline" and options["preset"] == "p1" and options["tune"] == "ull"
    assert options["zerolatency"] == "1" and options["bf"] == "0" and options["forced-idr"] == "1"
    assert options["rc"] == "cbr" and options["delay"] == "0" and options["rc-lookahead"] == "0"


# ------------------------------------------------------------------ the node and doctor


def test_the_swap_worker_runs_a_stream_on_forced_hardware_codecs_that_fall_back(engine, astronaut_image):
    _hardware_listed_but_unusable("h264_nvenc")
    _hardware_listed_but_unusable("h264_cuvid")
    publisher = H264Encoder(320, 240)
    samples = [p for i, frame in enumerate(_frames(4, (320, 240))) for p in publisher.encode(frame, i * 33)]
    out, headers = [], []

    def emit(packet, header):
        out.append(packet)
        if header is not None:
            headers.append(header)

    settings = EncoderSettings(video_encoder=FORCED_NVENC, video_decoder=FORCED_NVDEC)
    worker = LiveSwapWorker(FrameSwapper(engine, engine.register_source(astronaut_image)), settings, emit, "hw")
    worker.push(SequenceHeader(publisher.sequence_header))
    for sample in samples:
        worker.push(VideoSample(sample.data, sample.dts))
    deadline = time.monotonic() + 60.0  # stop() drops what is still queued (a live stream's end): wait for output first
    while worker.stats.frames_out < 1 and worker.failure is None and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.stop(timeout=60.0)
    assert worker.stats.decode_errors == 0 and worker.stats.frames_out >= 1
    assert len(headers) == 1 and out[0].keyframe
    decoder = H264Decoder()
    decoder.configure(headers[0])
    assert [(f.width, f.height) for p in out for f in decoder.decode(p.data, p.dts)] == [(320, 240)] * len(out)


def test_the_node_refuses_to_start_with_nvenc_it_cannot_open(tmp_path):
    _hardware_listed_but_unusable("h264_nvenc")
    env = {name: value for name, value in os.environ.items() if not name.startswith("SWAPCAST_")}
    env.update(SWAPCAST_SERVER__DATA_DIR=str(tmp_path), SWAPCAST_LIVE__VIDEO_ENCODER="nvenc")
    done = subprocess.run([sys.executable, "-m", "swapcast.cli", "serve", "--port", str(free_port()), "--rtmp-port", "0"],
                          env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert "swapcast serve: error: live.video_encoder 'nvenc' was asked for" in done.stderr
    assert "h264_nvenc cannot be used" in done.stderr and "PermissionError" in done.stderr
    assert "Traceback" not in done.stderr


def test_build_node_checks_the_codecs_before_loading_anything(monkeypatch, tmp_path):
    from swapcast.app import build_node

    _probes(monkeypatch, NVENC_OK, NVDEC_BROKEN)
    config = load_config(environ={}, overrides={"server": {"data_dir": str(tmp_path)}, "live": {"video_decoder": "nvdec"}})
    with pytest.raises(HardwareCodecUnavailableError, match="h264_cuvid cannot be used.*no driver"):
        build_node(config, engine=object())  # raised before the engine is touched


def test_a_software_node_never_probes_and_wires_its_choices(monkeypatch, tmp_path, engine):
    from swapcast.app import build_node

    _no_probing(monkeypatch)
    config = load_config(environ={}, overrides={"server": {"data_dir": str(tmp_path)}, "rtmp": {"port": 0},
                                                "live": {"video_encoder": "software", "video_decoder": "software"}})
    node = build_node(config, engine=engine)
    try:
        assert (node.video_encoder.name, node.video_decoder.name) == ("libx264", "h264")
        assert node.sessions.tuning.h264_encoder.name == "libx264"
    finally:
        asyncio.run(node.cleanup())


def test_doctor_plan_follows_the_configured_preference():
    from swapcast.commands.doctor import plan_lines

    broken = HardwareCodecs(NVENC_BROKEN, NVDEC_BROKEN, PYNV)
    lines = plan_lines("cpu", "onnxruntime", broken, video_encoder="software", video_decoder="nvdec")
    assert "will use      decode" not in "\n".join(lines)
    assert any(line.startswith("will use      no decoder:") and "no driver" in line for line in lines)
    assert "will use      encode software x264 (libx264) (live.video_encoder=software)" in lines
    working = HardwareCodecs(NVENC_OK, NVDEC_OK, PYNV)
    lines = plan_lines("cpu", "onnxruntime", working)
    assert any(line.startswith("will use      encode NVENC (h264_nvenc") for line in lines)
    assert any(line.startswith("will use      decode NVDEC (h264_cuvid") for line in lines)
    lines = plan_lines("cpu", "onnxruntime", working, video_encoder="software", video_decoder="software")
    assert any(line.startswith("will use      encode software x264") for line in lines)
    assert any(line.startswith("will use      decode software FFmpeg h264") for line in lines)


def test_doctor_reads_the_preference_from_the_config(monkeypatch, capsys):
    from swapcast.cli import main

    monkeypatch.setenv("SWAPCAST_LIVE__VIDEO_ENCODER", "software")
    monkeypatch.setenv("SWAPCAST_LIVE__VIDEO_DECODER", "auto")
    assert main(["doctor"]) == 0
    plan = [line for line in capsys.readouterr().out.splitlines() if line.startswith("will use")]
    assert "will use      encode software x264 (libx264) (live.video_encoder=software)" in plan
    assert any(line.startswith("will use      decode") and "live.video_decoder=auto" in line for line in plan)


def test_doctor_exits_2_when_the_node_could_not_start(monkeypatch, capsys):
    """An explicit nvenc where it cannot open (this machine: no driver) makes `serve`
    refuse to start, so doctor says so with its exit code too."""
    from swapcast.cli import main

    monkeypatch.setenv("SWAPCAST_LIVE__VIDEO_ENCODER", "nvenc")
    assert main(["doctor"]) == 2
    assert any(line.startswith("will use      no encoder:") for line in capsys.readouterr().out.splitlines())
