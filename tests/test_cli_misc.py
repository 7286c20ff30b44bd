"""``swapcast doctor``, ``bench engine``, ``--help``, the ``serve`` placeholder and the
installed console script (run as a real process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpu.models.builtin import BuiltinModels
from streamer.media.images import read_image, write_image
from swapcast.cli import main
from swapcast.local_cluster import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def entry_point() -> Path:
    """The ``swapcast`` console script installed beside this interpreter (the venv's bin)."""
    candidate = Path(sys.executable).parent / "swapcast"
    if not candidate.is_file():
        found = shutil.which("swapcast")
        assert found, "the swapcast console script is not installed (pip install -e .)"
        candidate = Path(found)
    return candidate


def test_doctor_reports_models_and_swapper(capsys):
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert code == 0
    for name, path in vars(BuiltinModels.locate()).items():
        assert str(path) in out, f"doctor does not show the built-in {name} model path"
        assert Path(path).is_file()
    assert "swapper=mesh" in out
    assert "onnxruntime" in out and "pyav" in out


def test_bench_engine_writes_report(tmp_path, capsys):
    report_dir = tmp_path / "bench"
    report_dir.mkdir()
    code = main(["bench", "engine", "--frames", "12", "--report", str(report_dir)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = captured.out
    for needle in ("640x480", "1280x720", "runner batch 16", "jitter"):
        assert needle in out, f"{needle!r} missing from the bench output:\n{out}"
    report = json.loads((report_dir / "report.json").read_text())
    assert {"resolutions", "batch", "jitter", "identity"} <= set(report)
    assert {"640x480", "1280x720"} <= set(report["resolutions"])
    assert "16" in report["batch"]
    pictures = sorted(report_dir.glob("*.png"))
    assert [p.name for p in pictures] == ["astronaut_onto_grace_hopper.png", "grace_hopper_onto_astronaut.png"]
    for picture in pictures:
        image = read_image(picture)
        assert image.shape[1] > image.shape[0], f"{picture.name} is not a side-by-side picture"


@pytest.mark.parametrize("argv", [["--help"], ["swap", "--help"], ["score", "--help"], ["bench", "engine", "--help"]])
def test_help_exits_zero(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: swapcast")
    if argv == ["swap", "--help"]:
        for flag in ("--source", "--target", "--output", "--source-face-index", "--faces", "--mouth-mask", "--blend"):
            assert flag in out


def test_swap_help_states_the_configured_occlusion_default(capsys):
    """The help text's default is the config schema's, not a copy that can drift from it."""
    from swapcast.config import SwapConfig

    with pytest.raises(SystemExit):
        main(["swap", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"in front (default: {SwapConfig.model_fields['occlusion'].default})" in out


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["swop"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_installed_console_script(tmp_path, astronaut_image, grace_image):
    """The real ``swapcast`` executable: a swap works, and bad input gives exit 2 with exactly
    one line on the process's whole stderr (native mediapipe/TF log chatter included)."""
    source, target = tmp_path / "astronaut.png", tmp_path / "grace.png"
    write_image(source, astronaut_image)
    write_image(target, grace_image)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPCAST_")}

    output = tmp_path / "out.png"
    done = subprocess.run([str(entry_point()), "swap", "--source", str(source), "--target", str(target),
                           "--output", str(output)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "1 of 1 face(s) swapped" in done.stdout
    assert read_image(output).shape == grace_image.shape

    # a missing source file -> exactly one line on the process's stderr
    missing = tmp_path / "missing.png"
    bad = subprocess.run([str(entry_point()), "swap", "--source", str(missing), "--target", str(target),
                          "--output", str(tmp_path / "bad.png")], capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [f"swapcast swap: error: source {missing}: no such file"]


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - 127.0.0.1 only
        return response.status, response.headers.get("Content-Type", ""), response.read()


def test_serve_answers_healthz_and_index():
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPCAST_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "swapcast.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--rtmp-port", "0"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline:
            assert process.poll() is None, f"serve exited early ({process.returncode}): {process.stdout.read()}"
            try:
                status, content_type, body = _get(f"{base}/healthz")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        assert status == 200, "GET /healthz did not answer 200 within 30 s"
        assert "json" in content_type and json.loads(body) == {"status": "ok"}

        status, content_type, body = _get(f"{base}/")
        assert status == 200
        assert content_type.startswith("text/html")
        assert b"<html" in body.lower()
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
