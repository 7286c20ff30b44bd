"""The device layer on a machine without CUDA (CI): NumPy, and clear errors for cuda."""

from __future__ import annotations

import numpy as np
import pytest

from gpu import device
from gpu.errors import SwapcastError


@pytest.fixture(autouse=True)
def _fresh_selection():
    device._reset_for_tests()
    yield
    device._reset_for_tests()


def test_cpu_is_numpy_and_host_arrays_pass_through():
    info = device.select_device("cpu")
    assert (info.backend, info.kind, info.is_cuda) == ("numpy", "cpu", False)
    assert device.xp() is np
    array = np.arange(6, dtype=np.float32)
    assert device.to_device(array) is array
    assert device.to_host(array) is array
    assert device.to_device([1, 2], dtype=np.float32).dtype == np.float32
    device.synchronize()  # a no-op on CPU


def test_auto_falls_back_to_the_cpu_with_the_reason(monkeypatch):
    monkeypatch.setattr(device, "detect_device", lambda: device.DeviceInfo("numpy", "CPU", None, "CuPy is not installed"))
    info = device.select_device("auto")
    assert info.kind == "cpu" and info.reason == "auto: CuPy is not installed"
    assert device.current_device() == info


def test_cuda_asked_for_without_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(device, "detect_device", lambda: device.DeviceInfo("numpy", "CPU", None, "CuPy found no CUDA driver"))
    with pytest.raises(device.DeviceUnavailableError, match="device 'cuda' was asked for.*CuPy found no CUDA driver"):
        device.select_device("cuda")
    assert isinstance(device.DeviceUnavailableError("x"), SwapcastError)


def test_cuda_is_chosen_when_cupy_sees_a_gpu(monkeypatch):
    gpu = device.DeviceInfo("cupy", "NVIDIA H200", 139.8, "1 CUDA device(s)")
    monkeypatch.setattr(device, "detect_device", lambda: gpu)
    assert device.resolve_device("cuda") == gpu
    assert device.resolve_device("auto").kind == "cuda"
    assert device.resolve_device("cpu").kind == "cpu"


def test_bad_preference_is_refused():
    with pytest.raises(SwapcastError, match="auto, cpu or cuda"):
        device.select_device("gpu")


def test_detect_device_here_gives_a_reason():
    info = device.detect_device()
    assert info.reason
    if info.kind == "cpu":
        assert info.name == "CPU" and info.memory_gb is None


def test_to_host_accepts_torch_tensors():
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(device.to_host(torch.arange(3)), [0, 1, 2])
    assert not device.is_device_array(np.zeros(1))


def test_doctor_says_what_the_node_will_use_and_why(capsys):
    from swapcast.cli import main

    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "not exercised by this repo's CI or GPU checks" in out  # TensorRT is never installed here
    for label in ("cupy ", "torch ", "nvenc ", "nvdec ", "pynvvideocodec "):
        assert any(line.startswith(label) for line in out.splitlines()), f"no {label.strip()!r} line:\n{out}"
    plan = [line for line in out.splitlines() if line.startswith("will use")]
    assert any("device cpu" in line for line in plan) and any("runner onnxruntime on cpu" in line for line in plan)
    assert any("decode software" in line for line in plan) and any("encode software x264" in line for line in plan)


def test_doctor_plan_reports_an_unmeetable_setting():
    from swapcast.commands.doctor import plan_lines

    lines = plan_lines("auto", "tensorrt", None)
    assert "runner" in lines[-1] and "cannot be met" in lines[-1] and "TensorRT" in lines[-1]
    if not device.detect_device().is_cuda:
        assert "cannot be met" in plan_lines("cuda", "auto", None)[0]


def test_hardware_codec_probe_opens_for_real():
    from streamer.media.hwcodecs import detect_hardware_codecs, probe_nvenc

    assert probe_nvenc("libx264").usable  # the probe itself works: a software encoder opens
    assert not probe_nvenc("no_such_codec").usable
    codecs = detect_hardware_codecs()
    if not codecs.nvenc.usable:
        assert codecs.nvenc.reason and "software" in codecs.encode_path
    if not codecs.nvdec.usable:
        assert codecs.nvdec.reason and "software" in codecs.decode_path
