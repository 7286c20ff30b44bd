"""Files: C2PA Content Credentials signed with a throw-away CA validate with the bindings'
own reader and fail once a byte changes; ``swapcast swap`` marks and signs its image and
video outputs; ``swapcast provenance verify`` reads both back, with exit codes for scripts."""

from __future__ import annotations

import json

import pytest

from gpu.watermark.embed import LumaPattern, mark
from streamer.media.images import write_image
from streamer.provenance.credentials import ContentCredentials, read_manifest
from streamer.provenance.marker import ProvenanceSettings
from streamer.provenance.payload import EPOCH_S, Payload
from streamer.samples import grace_hopper, moving_face_frames
from swapcast.cli import main
from provenance_kit import h264, natural_clip

SETTINGS = ProvenanceSettings(key=b"files test key", issuer=12, issuer_name="tests")
# a fixed hour, so the test marks the same payload whatever the clock says (payloads that a
# single JPEG once lost are covered in test_watermark_payloads.py)
PAYLOAD = Payload.for_stream(12, "files-1", seconds=EPOCH_S)


@pytest.fixture(scope="module")
def signed_files(tmp_path_factory, test_ca):
    """A marked JPEG and a marked MP4, each signed."""
    folder = tmp_path_factory.mktemp("signed")
    settings = _with_ca(SETTINGS, test_ca)
    frames = natural_clip(640, 480, 30, seed=9)
    pattern = LumaPattern.make(settings.watermark_key, PAYLOAD.bits(), 480, 640, settings.strength)
    for frame in frames:
        mark(frame, pattern)
    image, video = folder / "marked.jpg", folder / "marked.mp4"
    write_image(image, frames[0])
    h264(frames, 1500, video)
    credentials = ContentCredentials(settings)
    assert credentials.sign(image, stream_id="files-1") and credentials.sign(video, stream_id="files-1")
    return {"image": image, "video": video}


@pytest.mark.parametrize("kind", ["image", "video"])
def test_manifest_validates_and_a_changed_byte_fails(kind, signed_files, test_ca, tmp_path):
    path = signed_files[kind]
    mime = "image/jpeg" if kind == "image" else "video/mp4"
    report = read_manifest(path, mime, test_ca.anchors)
    assert report.valid and report.state == "Trusted", report
    action = report.actions[0]
    assert action["action"] == "c2pa.created"
    assert action["digitalSourceType"].endswith("/trainedAlgorithmicMedia")
    assert action["parameters"]["stream"] == "files-1"

    data = bytearray(path.read_bytes())
    data[len(data) * 2 // 3] ^= 0x01  # one bit of the picture data
    changed = read_manifest(bytes(data), mime, test_ca.anchors)
    assert changed.present and not changed.valid


@pytest.mark.parametrize("kind", ["image", "video"])
def test_verify_cli_exit_codes(kind, signed_files, test_ca, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SWAPCAST_PROVENANCE__KEY", "files test key")
    monkeypatch.setenv("SWAPCAST_PROVENANCE__C2PA_TRUST_ANCHORS", str(test_ca.anchors))
    path = signed_files[kind]
    assert main(["provenance", "verify", str(path), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["watermark"]["found"] and answer["watermark"]["payload"] == PAYLOAD.to_dict()
    assert answer["c2pa"]["valid"] and answer["c2pa"]["state"] == "Trusted"

    tampered = tmp_path / f"tampered{path.suffix}"
    data = bytearray(path.read_bytes())
    data[len(data) * 2 // 3] ^= 0x01
    tampered.write_bytes(bytes(data))
    assert main(["provenance", "verify", str(tampered)]) == 3
    assert "INVALID" in capsys.readouterr().out

    key_file = tmp_path / "wrong.key"
    key_file.write_text("not the key")
    assert main(["provenance", "verify", str(path), "--key-file", str(key_file)]) == 1
    assert "no watermark found" in capsys.readouterr().out


def test_verify_cli_refuses_bad_input(tmp_path, capsys):
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video at all")
    assert main(["provenance", "verify", str(junk)]) == 2
    assert main(["provenance", "verify", str(tmp_path / "missing.png")]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.slow
def test_swap_marks_and_signs_its_image_and_video_outputs(tmp_path, test_ca, monkeypatch, capsys):
    for name, value in {"KEY": "swap test key", "C2PA_CERT": test_ca.cert_chain, "C2PA_KEY": test_ca.key,
                        "C2PA_TRUST_ANCHORS": test_ca.anchors, "ISSUER": "77"}.items():
        monkeypatch.setenv(f"SWAPCAST_PROVENANCE__{name}", str(value))
    frames = moving_face_frames(grace_hopper(), 20, size=(640, 480))
    target_image, target_video = tmp_path / "target.png", tmp_path / "target.mp4"
    write_image(target_image, frames[0])
    h264(frames, 3000, target_video)
    source = tmp_path / "source.png"
    from streamer.samples import astronaut

    write_image(source, astronaut())
    for target, output in ((target_image, tmp_path / "out.jpg"), (target_video, tmp_path / "out.mp4")):
        assert main(["swap", "--source", str(source), "--target", str(target), "--output", str(output),
                     "--no-progress"]) == 0
        note = capsys.readouterr().out  # after the result line: a failed run says only its error
        assert "watermark on (issuer 77" in note and "C2PA Content Credentials on files" in note
        assert main(["provenance", "verify", str(output), "--json"]) == 0, output
        answer = json.loads(capsys.readouterr().out)
        assert answer["watermark"]["payload"]["issuer"] == 77
        assert answer["watermark"]["payload"]["stream_hash"] in note  # the run's id, printed with the result
        assert answer["c2pa"]["state"] == "Trusted"


def _with_ca(settings: ProvenanceSettings, ca) -> ProvenanceSettings:
    from dataclasses import replace

    return replace(settings, c2pa_cert=ca.cert_chain, c2pa_key=ca.key, c2pa_trust_anchors=ca.anchors)
