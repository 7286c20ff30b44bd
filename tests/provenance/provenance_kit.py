"""Media and certificates for the provenance tests: a natural-looking moving clip, H.264
encode/decode in memory, the attacks of the issue, and a throw-away C2PA CA."""

from __future__ import annotations

import datetime
import io
from dataclasses import dataclass
from pathlib import Path

import av
import cv2
import numpy as np
from skimage import data

FPS = 30


def natural_clip(width: int, height: int, count: int, seed: int = 0) -> list[np.ndarray]:
    """A camera slowly panning over a photo, with a second picture sliding across it: texture,
    flat areas, edges and motion, RGB uint8."""
    rng = np.random.default_rng(seed)
    base = cv2.resize(np.ascontiguousarray(data.astronaut()), (int(width * 1.25), int(height * 1.25)))
    inset = cv2.resize(np.ascontiguousarray(data.coffee()), (width // 3, height // 3))
    start = rng.integers(0, 20, 2)
    frames = []
    for i in range(count):
        x0, y0 = int(start[0] + i * 1.5) % (base.shape[1] - width), int(start[1] + i * 0.7) % (base.shape[0] - height)
        frame = base[y0:y0 + height, x0:x0 + width].copy()
        left = (i * 5) % (width - inset.shape[1])
        frame[height // 2:height // 2 + inset.shape[0], left:left + inset.shape[1]] = inset
        frames.append(np.ascontiguousarray(frame))
    return frames


def h264(frames: list[np.ndarray], kbps: int, path: Path | None = None) -> list[np.ndarray]:
    """Encode at ``kbps`` (x264, like a platform re-encode) and decode again; also written to
    ``path`` when given."""
    target = str(path) if path is not None else io.BytesIO()
    with av.open(target, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height = frames[0].shape[1] & ~1, frames[0].shape[0] & ~1
        stream.pix_fmt, stream.bit_rate = "yuv420p", kbps * 1000
        stream.options = {"preset": "veryfast"}
        for frame in frames:
            even = np.ascontiguousarray(frame[: stream.height, : stream.width])
            for packet in stream.encode(av.VideoFrame.from_ndarray(even, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    if path is None:
        target.seek(0)
    with av.open(target) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def downscale(frames: list[np.ndarray], height: int) -> list[np.ndarray]:
    width = round(frames[0].shape[1] * height / frames[0].shape[0]) & ~1
    return [cv2.resize(f, (width, height), interpolation=cv2.INTER_AREA) for f in frames]


def crop(frames: list[np.ndarray], share: float = 0.1) -> list[np.ndarray]:
    """Cut ``share`` of the width and of the height away, unevenly (the grid moves)."""
    height, width = frames[0].shape[:2]
    top, left = int(height * share * 0.3), int(width * share * 0.7)
    bottom, right = height - (int(height * share) - top), width - (int(width * share) - left)
    return [np.ascontiguousarray(f[top:bottom, left:right]) for f in frames]


def luma(frame: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(frame, cv2.COLOR_RGB2YUV)[..., 0]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 10 * np.log10(255.0**2 / mse)


@dataclass(frozen=True)
class TestCa:
    """A throw-away CA and a C2PA signing certificate issued by it (PEM files)."""

    cert_chain: Path
    key: Path
    anchors: Path


def make_test_ca(folder: Path) -> TestCa:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common),
                          x509.NameAttribute(NameOID.ORGANIZATION_NAME, "swapcast tests")])

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("swapcast test CA")).issuer_name(name("swapcast test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=7))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(name("swapcast test signer")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.EMAIL_PROTECTION]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths = TestCa(folder / "signer-chain.pem", folder / "signer-key.pem", folder / "ca.pem")
    paths.cert_chain.write_bytes(cert.public_bytes(pem) + ca.public_bytes(pem))
    paths.key.write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    paths.anchors.write_bytes(ca.public_bytes(pem))
    return paths
