"""Content Credentials (C2PA) on the files the node writes, and reading them back, with the
maintained ``c2pa-python`` bindings.

The manifest says the file was made by a trained algorithm (IPTC digital source type
``trainedAlgorithmicMedia``), by which issuer and for which job or session, signed with the
certificate and key of the config. Signing rewrites the file in place (through a temporary
file next to it), so an interrupted run never leaves a half-signed output."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu.errors import SwapcastError
from streamer.provenance.marker import ProvenanceSettings

TRAINED_ALGORITHMIC_MEDIA = "http://cv.iptc.org/newscodes/digitalsourcetype/trainedAlgorithmicMedia"
MIME_TYPES = {
    ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".webp": "image/webp",
    ".mp4": "video/mp4", ".m4v": "video/mp4", ".mov": "video/quicktime",
}


class CredentialsError(SwapcastError):
    """The C2PA certificate or key cannot be used, or a file cannot be signed."""


def mime_type(path: Path) -> str | None:
    return MIME_TYPES.get(path.suffix.lower())


@dataclass(frozen=True)
class ManifestReport:
    """What the bindings' own reader says about a file's C2PA manifest."""

    present: bool
    state: str | None  # the reader's validation state: Trusted, Valid or Invalid
    failures: list[str]  # validation failure codes, e.g. assertion.dataHash.mismatch
    actions: list[dict]
    generator: str | None

    @property
    def valid(self) -> bool:
        return self.present and self.state in ("Valid", "Trusted") and not self.failures

    def to_dict(self) -> dict[str, Any]:
        return {"present": self.present, "state": self.state, "valid": self.valid, "failures": self.failures,
                "actions": self.actions, "generator": self.generator}


NO_MANIFEST = ManifestReport(False, None, [], [], None)


class ContentCredentials:
    """Signs files with the configured certificate; ``enabled`` is False without one."""

    def __init__(self, settings: ProvenanceSettings) -> None:
        self.settings = settings
        self.enabled = bool(settings.c2pa_cert and settings.c2pa_key)
        if self.enabled:
            try:
                self._chain = Path(settings.c2pa_cert).read_bytes()
                self._key = Path(settings.c2pa_key).read_bytes()
            except OSError as exc:
                raise CredentialsError(f"provenance C2PA certificate or key cannot be read: {exc}") from None

    def sign(self, path: Path, *, stream_id: str, title: str | None = None) -> bool:
        """Embed a signed manifest in ``path``; False when signing is off or the type has
        no C2PA support (e.g. .mkv), which the caller may report."""
        mime = mime_type(path)
        if not self.enabled or mime is None:
            return False
        import c2pa

        manifest = {
            "claim_generator_info": [{"name": "swapcast"}],
            "title": title or path.name,
            "assertions": [{"label": "c2pa.actions.v2", "data": {"actions": [{
                "action": "c2pa.created",
                "digitalSourceType": TRAINED_ALGORITHMIC_MEDIA,
                "softwareAgent": {"name": "swapcast"},
                "description": "face swap",
                "parameters": {"issuer": self.settings.issuer_name, "issuer_id": self.settings.issuer,
                               "stream": stream_id},
            }]}}],
        }
        temp = path.with_name(f".{path.name}.c2pa")
        try:
            signer = c2pa.Signer.from_info(c2pa.C2paSignerInfo(_algorithm(self._key), self._chain, self._key, None))
            with signer, c2pa.Builder(json.dumps(manifest)) as builder, open(path, "rb") as source, open(temp, "w+b") as dest:
                builder.sign(signer, mime, source, dest)
            os.replace(temp, path)
        except c2pa.C2paError as exc:
            raise CredentialsError(f"{path.name}: C2PA signing failed: {exc}") from None
        finally:
            temp.unlink(missing_ok=True)
        return True


def read_manifest(data: bytes | Path, mime: str, trust_anchors: Path | None = None) -> ManifestReport:
    """Validate the manifest of a file (or its bytes) with the bindings' reader. With
    ``trust_anchors`` (PEM), a certificate chaining to them is reported Trusted."""
    import c2pa

    stream = io.BytesIO(data.read_bytes() if isinstance(data, Path) else data)
    context = None
    if trust_anchors is not None:
        settings = {"verify": {"verify_trust": True}, "trust": {"user_anchors": Path(trust_anchors).read_text()}}
        context = c2pa.Context(c2pa.Settings.from_json(json.dumps(settings)))
    try:
        reader = c2pa.Reader(mime, stream, context=context) if context else c2pa.Reader(mime, stream)
    except Exception as exc:  # noqa: BLE001 - the bindings raise C2paError and others on damaged files
        if "ManifestNotFound" in type(exc).__name__ or "no JUMBF" in str(exc) or "not found" in str(exc).lower():
            return NO_MANIFEST
        return ManifestReport(True, "Invalid", [f"unreadable: {exc}"], [], None)
    with reader:
        results = reader.get_validation_results() or {}
        failures = [item.get("code", "?") for item in (results.get("activeManifest") or {}).get("failure", [])]
        manifest = json.loads(reader.json())
        active = manifest.get("manifests", {}).get(manifest.get("active_manifest"), {})
        actions = [a for assertion in active.get("assertions", []) if assertion.get("label", "").startswith("c2pa.actions")
                   for a in assertion.get("data", {}).get("actions", [])]
        generators = active.get("claim_generator_info") or [{}]
        return ManifestReport(True, reader.get_validation_state(), failures, actions, generators[0].get("name"))


def _algorithm(key_pem: bytes) -> bytes:
    """The C2PA signing algorithm for the key's type (EC P-256/384, RSA-PSS, Ed25519)."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(key_pem, password=None)
    except ValueError as exc:
        raise CredentialsError(f"provenance C2PA key is not an unencrypted PEM private key: {exc}") from None
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return {256: b"es256", 384: b"es384", 521: b"es512"}[key.curve.key_size]
    if isinstance(key, rsa.RSAPrivateKey):
        return b"ps256"
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return b"ed25519"
    raise CredentialsError(f"provenance C2PA key type {type(key).__name__} is not supported")
