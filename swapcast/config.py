"""The one configuration schema of swapcast.

Precedence (lowest first): the schema's embedded defaults, a YAML file (``--config FILE``
or ``SWAPCAST_CONFIG``), ``SWAPCAST_*`` environment variables, command-line flags.
Nested keys use ``__`` in the environment: ``SWAPCAST_ENGINE__MODELS_DIR=/models``,
``SWAPCAST_SWAP__BLEND=0.8``. Unknown keys are errors, so a typo never passes silently.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpu.engine import EngineSettings
from gpu.errors import SwapcastError
from gpu.options import SwapOptions
from gpu.processors import ProcessorSettings
from gpu.processors.parser import DEFAULT_KEEP, REGIONS
from gpu.threads import ThreadBudget
from signaling.numbers import parse_natural

ENV_PREFIX = "SWAPCAST_"
_INTEGER = (int, int | None)
CONFIG_ENV = "SWAPCAST_CONFIG"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _integers_in_ascii(cls, value: object, info: ValidationInfo) -> object:
        """An integer field written as text (the environment, a quoted YAML value) is read
        by the project's one number parser: ASCII digits only, where the schema alone would
        take ' 12', '+12' and '1_000'."""
        if isinstance(value, str) and info.field_name is not None and cls.model_fields[info.field_name].annotation in _INTEGER:
            return parse_natural(value.strip(), info.field_name)
        return value


class ProcessorsConfig(_Section):
    """FaceFusion's processors from ``engine.models_dir`` (``gpu/processors``): each one is used
    when its file is there (xseg_*, bisenet_resnet_*, gfpgan_1.4 / codeformer / gpen_bfr_*,
    open_nsfw) and not turned off here."""

    occluder: bool = True
    parser: bool = True
    parser_keep: list[str] = Field(list(DEFAULT_KEEP), description="face parser regions where the target stays")
    enhancer: Literal["auto", "live", "off"] = Field("auto", description="auto: offline jobs and swap; live: live sessions too")
    enhancer_model: Literal["auto", "gfpgan_1.4", "codeformer", "gpen_bfr_512", "gpen_bfr_256"] = "auto"
    enhancer_blend: float = Field(0.8, ge=0, le=1)
    enhancer_weight: float = Field(0.5, ge=0, le=1, description="CodeFormer fidelity (0 = most restored)")
    enhancer_live_budget_ms: float = Field(10.0, gt=0, le=1000, description="live: a stream whose enhance step "
                                           "takes longer (median of 10 frames) goes on without it")
    mask_live_budget_ms: float = Field(20.0, gt=0, le=1000, description="live: a stream whose occluder + parser step "
                                       "takes longer (median of 10 frames) goes on without them")
    content_gate: bool = True
    content_threshold: float = Field(0.8, gt=0, le=1)
    content_sample_s: float = Field(1.0, gt=0, le=60, description="streams: one frame checked per this many seconds")

    @field_validator("parser_keep")
    @classmethod
    def _regions(cls, regions: list[str]) -> list[str]:
        unknown = [r for r in regions if r not in REGIONS]
        if unknown:
            raise ValueError(f"unknown region(s) {', '.join(unknown)}; choose from {', '.join(REGIONS)}")
        return regions

    def settings(self) -> ProcessorSettings:
        return ProcessorSettings(**{**self.model_dump(), "parser_keep": tuple(self.parser_keep)})


class EngineConfig(_Section):
    swapper: Literal["auto", "mesh", "mesh3d", "inswapper"] = "auto"
    models_dir: Path | None = Field(None, description="folder with det_10g / w600k_r50 / inswapper_128 .onnx files")
    prefer_fp16: bool = False
    crop_size: int = Field(256, ge=64, le=1024, multiple_of=32)
    max_faces: int = Field(4, ge=1, le=16)
    detector_range: Literal["short", "full"] = "full"
    tracker: Literal["graphs", "mediapipe"] = Field("graphs", description="video tracking: the converted graphs batched across sessions, or mediapipe's own")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    runner: Literal["auto", "onnxruntime", "torch", "tensorrt", "triton"] = "auto"
    triton_url: str = Field("http://127.0.0.1:8000", description="runner triton: Triton's HTTP/REST endpoint, where the swap model runs")
    triton_timeout_s: float = Field(1.0, gt=0, le=30, description="runner triton: one request; slower = the frame goes on unswapped")
    triton_model: str = Field("", description="runner triton: the swap model's name on the server (default: the swapper's name)")
    runner_threads: int = Field(0, ge=0, le=64)
    max_batch: int = Field(32, ge=1, le=256)
    max_queue_delay_ms: float = Field(4.0, ge=0, le=100)
    engine_cache_dir: Path | None = None
    processors: ProcessorsConfig = ProcessorsConfig()

    def settings(self) -> EngineSettings:
        return EngineSettings(**self.model_dump(exclude={"processors"}), processors=self.processors.settings())


MAX_MAPPED_PEOPLE = 16
KEEP_FACE = "keep"  # what a person in faces_map wears to stay as they are
_FACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # a face id or a person id (person-2)


class SwapConfig(_Section):
    face_selection: Literal["all", "largest", "reference"] = "all"
    reference_threshold: float = Field(0.6, gt=0, le=2)
    mouth_mask: bool = False
    blend: float = Field(1.0, ge=0, le=1)
    feather: float = Field(0.06, ge=0, le=0.5)
    colour_match: bool = True
    smoothing: bool = True
    occlusion: Literal["auto", "objects", "off"] = Field(
        "off", description="auto: the built-in estimate keeps what is in front of a face, the glasses it wears too; objects: "
                           "what comes in front, not its glasses (off by default: it costs identity, see docs: guides/occlusion)")
    eyes: Literal["target", "source"] = Field("source", description="mesh3d: the source's eyes, opened and closed with the target's lids, or the target's own (its gaze)")
    faces_map: dict[str, str] = Field(
        default_factory=dict,
        description="map faces: who wears which face, {person: face id or 'keep'}; a person is an id the session (or "
                    "'swapcast faces scan') reported, person-2, or the face id of a reference photo of them (matched by "
                    f"identity under reference_threshold); at most {MAX_MAPPED_PEOPLE} (docs: guides/map-faces)")
    unmapped: Literal["source", "keep"] = Field(
        "source", description="with faces_map: the people it does not name wear the session's own face (source) or stay "
                              "as they are (keep)")

    @field_validator("faces_map")
    @classmethod
    def _faces_map(cls, mapping: dict[str, str]) -> dict[str, str]:
        if len(mapping) > MAX_MAPPED_PEOPLE:
            raise ValueError(f"names {len(mapping)} people; at most {MAX_MAPPED_PEOPLE}")
        for person, face in mapping.items():
            if person == KEEP_FACE or not _FACE_NAME.fullmatch(person):
                raise ValueError(f"{person[:80]!r} is not a person: use an id a session or scan reported (person-2) "
                                 "or the face id of a reference photo")
            if face != KEEP_FACE and not _FACE_NAME.fullmatch(face):
                raise ValueError(f"{person} wears {face[:80]!r}: use a face id (GET /api/v1/faces) or 'keep'")
        return dict(mapping)

    @field_validator("occlusion", mode="before")
    @classmethod
    def _occlusion_from_boolean(cls, value: object) -> object:
        """YAML and the environment read a bare ``off``/``on`` as a boolean."""
        return {True: "auto", False: "off"}.get(value, value) if isinstance(value, bool) else value

    def options(self) -> SwapOptions:
        return SwapOptions(**self.model_dump(exclude={"faces_map", "unmapped"}))

    def with_live_changes(self, changes: object) -> SwapConfig:
        """These options with a live session's changes (``options`` of the sessions API)
        applied, checked by this one schema wherever they arrive (node or gateway):
        ``ValueError`` with the API's 400 reason, naming each bad field."""
        if not isinstance(changes, dict):
            raise ValueError("options must be a JSON object of swap settings")
        try:
            merged = type(self).model_validate({**self.model_dump(), **changes})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'options'}: {err['msg']}" for err in exc.errors()
            )
            raise ValueError(f"invalid options: {problems}") from None
        if merged.face_selection == "reference":
            raise ValueError("invalid options: face_selection 'reference' needs a reference photo, "
                             "which live sessions do not take yet; use 'all' or 'largest'")
        return merged

    def normalised_changes(self, changes: object) -> dict[str, Any]:
        """``changes`` as the schema reads them (``"smoothing": "off"`` is ``false``,
        ``"blend": "0.5"`` is ``0.5``): what a session or stream key stores and answers, so
        what was validated is what is kept. ``ValueError`` as ``with_live_changes``."""
        merged = self.with_live_changes(changes).model_dump(mode="json")
        return {name: merged[name] for name in changes}  # type: ignore[union-attr]  (a dict: checked above)


class EncodeConfig(_Section):
    codec: str = "libx264"
    preset: str = "veryfast"  # offline render; live sessions use ultrafast/zerolatency
    crf: int = Field(18, ge=0, le=51)


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    data_dir: Path = Field(Path("~/.local/share/swapcast"), description="stream keys, stored faces, recordings")
    log_format: Literal["text", "json"] = "text"  # json: one object per line, for log shippers
    # pages on these origins (https://app.example.com) may call the API, WHIP and WHEP from the
    # browser (CORS); empty: same origin only; ["*"]: any page, still with its own token or key
    cors_origins: list[str] = Field(default_factory=list)
    # against slowloris and socket floods (signaling/connection_limits.py): open HTTP connections
    # one address may hold (auth.trusted_proxies are exempt: a gateway, a TLS proxy), and the
    # seconds a request's headers (and an HTTPS handshake) may take; bodies are not timed
    max_connections_per_ip: int = Field(64, ge=1)
    request_header_timeout_s: float = Field(10.0, gt=0, le=300)

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        from signaling.cors import CorsPolicy

        CorsPolicy(origins)  # ValueError naming the entry and how to write it
        return origins


class TlsConfig(_Section):
    """HTTPS on the HTTP listener (node or gateway) and RTMPS beside RTMP, one certificate.
    Browsers allow the camera only on a secure origin: a page opened from another machine
    needs HTTPS, here or on a proxy in front (``auth.trusted_proxies``). SIGHUP reloads the
    certificate without dropping sessions."""

    cert_file: Path | None = Field(None, description="PEM certificate (chain allowed); with key_file, HTTP becomes HTTPS")
    key_file: Path | None = Field(None, description="PEM private key of cert_file")
    http_redirect_port: int | None = Field(None, ge=1, le=65535, description="plain-HTTP port that only redirects to HTTPS")

    @model_validator(mode="after")
    def _pair(self) -> TlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        if self.http_redirect_port is not None and self.cert_file is None:
            raise ValueError("http_redirect_port needs cert_file and key_file (it redirects to HTTPS)")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


class LiveConfig(_Section):
    """Real-time encoding of live sessions (RTMP re-publish, WebRTC)."""

    preset: str = "ultrafast"  # x264, always with tune=zerolatency
    bitrate_kbps: int = Field(2500, ge=100, le=50000)
    keyframe_interval_s: float = Field(2.0, gt=0, le=10)
    push_retry_initial_s: float = Field(1.0, gt=0)
    push_retry_max_s: float = Field(30.0, gt=0)
    rtmp_catch_up_ms: int = Field(500, ge=0, le=2000, description="how long a decoded RTMP frame may wait for the swap "
                                  "before it is dropped: a publisher's start-up burst is swapped, not dropped; 0 = only "
                                  "the newest frame, as WebRTC sessions (decoded frames held: at most this long's worth)")
    # H.264 out (RTMP re-publish, WebRTC): auto = NVENC when it opens here, else x264;
    # nvenc where it cannot open is a start-up error
    video_encoder: Literal["auto", "software", "nvenc"] = "auto"
    # H.264 in (RTMP ingest): auto = NVDEC (h264_cuvid) when it opens here, else FFmpeg's
    video_decoder: Literal["auto", "software", "nvdec"] = "auto"


class IceServer(_Section):
    urls: list[str]
    username: str | None = None
    credential: str | None = None


class WebRtcConfig(_Section):
    max_sessions: int = Field(4, ge=1, le=256)  # more peers get HTTP 503
    codec: Literal["h264", "vp8"] = "h264"
    min_bitrate_kbps: int = Field(500, ge=50)
    max_bitrate_kbps: int = Field(4000, ge=100)
    # ICE host addresses offered to peers; empty = every interface (loopback for tests)
    host_addresses: list[str] = []
    ice_servers: list[IceServer] = []  # STUN/TURN, e.g. {urls: ["stun:stun.example.org:3478"]}
    # Browsers' TURN with time-limited credentials (coturn's REST-API scheme, use-auth-secret):
    # each placed session carries username "<expiry>:<user>" and its HMAC under the shared
    # secret, valid turn_ttl_s; the secret itself never reaches a client.
    turn_urls: list[str] = Field([], description="turn:/turns: URLs browsers get, e.g. ['turn:turn.example.org:3478']")
    turn_shared_secret: str | None = Field(None, description="the TURN server's static-auth-secret")
    turn_ttl_s: int = Field(3600, ge=60, le=86400)

    @model_validator(mode="after")
    def _turn_complete(self) -> WebRtcConfig:
        if bool(self.turn_urls) != bool(self.turn_shared_secret):
            raise ValueError("turn_urls and turn_shared_secret go together")
        if any(not url.startswith(("turn:", "turns:")) for url in self.turn_urls):
            raise ValueError("turn_urls must start with turn: or turns:")
        return self


class RtmpConfig(_Section):
    port: int = Field(1935, ge=0, le=65535)  # 0 = any free port (tests)
    stall_timeout_s: float = Field(5.0, gt=0)
    setup_timeout_s: float = Field(10.0, gt=0, description="a connection that has not published or played by then is cut")
    max_pending_per_ip: int = Field(32, ge=1, description="connections of one address that have not published or "
                                                          "played yet; the next one is closed at once")
    chunk_size: int = Field(4096, ge=128, le=65536)
    tls_port: int | None = Field(None, ge=0, le=65535, description="RTMPS port (tls.cert_file's certificate); 0 = any free")


class PushConfig(_Section):
    """Where stream keys may re-publish (their ``push`` destinations). The node opens those
    connections itself, so a user's key must not point them into the operator's network:
    loopback, private, link-local, shared, multicast, unspecified and other non-public
    addresses (IPv6 ULA too), and every IPv6 range that embeds or translates IPv4 (::/96,
    ::ffff:0:0/96, ::ffff:0:0:0/96, 64:ff9b::/96, 64:ff9b:1::/48, 2002::/16, 2001::/32:
    ``signaling.push_policy.IPV4_IN_IPV6``) are refused for users' keys unless listed in
    ``allowed_networks``, when the key is made and again at every connect (DNS answers change). Admins' and command-line keys are not restricted. Users'
    job ``webhook_url``s are held to the same rule when the job is submitted."""

    allowed_hosts: list[str] = Field([], description="when set, users' keys push only to these hosts: a name, or "
                                                     "'.example.com' for its subdomains")
    allowed_networks: list[str] = Field([], description="CIDRs users' keys may push to although not public, "
                                                        "e.g. ['127.0.0.1/32'] for a relay on the node")

    ca_file: Path | None = Field(None, description="CA bundle rtmps:// destinations are verified against; "
                                                   "default: the system's")

    @field_validator("allowed_networks")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"{network!r} is not an address or CIDR network") from None
        return networks


class QuotasConfig(_Section):
    """What one user can make the node keep or do, each bounded (docs/operations/threat-model.md
    lists these with the other limits and where each is enforced). Going past one is a 4xx
    (400, 409, 413 or 429) that says which limit it was; admins are held to them too."""

    keys_per_user: int = Field(64, ge=1, le=100_000, description="stream keys one user holds, revoked ones not yet "
                                                                 "replaced included (their oldest make room)")
    push_per_key: int = Field(16, ge=0, le=1000, description="push destinations of one stream key made over the API")
    faces_per_user: int = Field(64, ge=1, le=100_000, description="face pictures one user keeps (samples do not count)")
    photos_per_face: int = Field(8, ge=1, le=32, description="photos of one person a face is made of (in one upload, or "
                                                            "added later; each up to 10 MB, kept cropped to the head)")
    event_sockets_per_user: int = Field(8, ge=1, le=1000, description="events WebSockets one user holds open at once")
    request_body_kb: int = Field(128, ge=16, le=16384, description="a JSON request body (uploads have their own limits: "
                                                                   "faces 10 MB, verify 200 MB, jobs.max_upload_mb)")


class ClusterConfig(_Section):
    """Several nodes behind a gateway, sharing a Redis registry. Without ``redis_url`` a
    node is the embedded single node with an in-process registry."""

    redis_url: str | None = Field(None, description="redis://host:port/db (rediss:// for TLS), or a Redis Cluster: "
                                                    "redis+cluster://host:port[,host:port...]; unset = embedded single node")
    advertise: str | None = Field(None, description="HOST:PORT the gateway uses to reach this node's HTTP API")
    node_id: str | None = None  # default: generated at start
    capacity: int = Field(0, ge=0, le=4096)  # live sessions this node takes; 0 = webrtc.max_sessions
    heartbeat_s: float = Field(0.5, gt=0, le=30)
    node_ttl_s: float = Field(2.0, gt=0, le=120)  # a node silent this long is dead; its sessions move
    offer_timeout_s: float = Field(60.0, gt=0)  # a placed session with no media by then is dropped

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str | None) -> str | None:
        schemes = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
        if url is not None and url.partition("://")[0] not in schemes:
            raise ValueError(f"must start with {', '.join(s + '://' for s in schemes)} (got {redacted_url(url)!r})")
        return url


class JobsConfig(_Section):
    """Offline video jobs: chunks on Redis Streams, rendered by workers. Their files (uploads,
    chunks, outputs) live in ``storage_dir`` or, with ``storage: s3``, in an S3 bucket whose
    credentials come from the AWS chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), never
    from here."""

    storage: Literal["local", "s3"] = "local"
    storage_dir: Path | None = Field(None, description="local storage: uploads, chunks and outputs; default <data_dir>/jobs")
    s3_endpoint_url: str | None = Field(None, pattern=r"^https?://", description="S3-compatible service; null = AWS")
    s3_bucket: str | None = None  # required with storage s3
    s3_prefix: str = ""  # keys go under <prefix>/
    s3_region: str | None = None  # null = AWS_DEFAULT_REGION or the profile's
    chunk_seconds: float = Field(3.0, ge=1, le=30)  # target chunk length; cuts fall on keyframes
    claim_timeout_s: float = Field(30.0, gt=0)  # a chunk unacknowledged this long is reclaimed
    max_attempts: int = Field(3, ge=1, le=20)  # then the chunk goes to the dead-letter stream
    max_upload_mb: int = Field(2048, ge=1)
    max_active_per_user: int = Field(16, ge=1, description="a user's unfinished jobs; the next submission is a 429")
    max_frames: int = Field(216_000, ge=1, description="frames a job's video may show (1 h at 60 fps); more fail the "
                                                       "job at its split, before anything is decoded")
    chunk_timeout_s: float = Field(600.0, gt=0, description="wall time one chunk's render may take; then it fails "
                                                            "(and is retried up to max_attempts)")
    webhook_secret: str | None = None  # HMAC-SHA256 key for webhook bodies

    @model_validator(mode="after")
    def _s3_needs_a_bucket(self) -> JobsConfig:
        if self.storage == "s3" and not self.s3_bucket:
            raise ValueError("storage s3 needs s3_bucket")
        return self


MIN_JWT_SECRET_BYTES = 32


def redacted_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part (if any) written as ``***``:
    what may be printed and logged."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hosts = rest.partition("@")
    if not at or "/" in userinfo:
        return url
    user, colon, _password = userinfo.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{hosts}"


class AuthConfig(_Section):
    """Who may use the API: JWT bearer tokens, HS256 with ``jwt_secret`` or RS256 checked
    against ``jwks_file``; claims ``sub`` (the user), ``role`` (admin | user), ``exp``.
    With neither set, a server bound to loopback makes a development secret and prints an
    admin token at start; any other bind, or a cluster, refuses to start."""

    jwt_secret: str | None = Field(None, description="HS256 shared secret (nodes and gateway of a cluster share it)")
    jwks_file: Path | None = Field(None, description="JWKS with the RS256 public keys tokens are signed with")
    issuer: str | None = None  # when set, tokens must carry this iss
    audience: str | None = None  # when set, tokens must carry this aud
    requests_per_minute_per_token: int = Field(600, ge=1)
    requests_per_minute_per_ip: int = Field(1200, ge=1)
    max_sessions_per_user: int = Field(4, ge=1, le=1000)  # live sessions one user may hold (admins too)
    audit_log: Path | None = Field(None, description="append-only JSON lines; default <data_dir>/audit.jsonl")
    trusted_proxies: list[str] = []  # gateways (addresses or CIDRs) whose X-Forwarded-For names the client

    @field_validator("jwt_secret")
    @classmethod
    def _secret_long_enough(cls, secret: str | None) -> str | None:
        # RFC 7518 3.2: an HS256 key must have at least 256 bits; a short one can be guessed offline
        if secret is not None and len(secret.encode()) < MIN_JWT_SECRET_BYTES:
            raise ValueError(f"must be at least {MIN_JWT_SECRET_BYTES} bytes (HS256 needs a 256-bit key), "
                             "e.g. the output of `openssl rand -base64 48`")
        return secret


class ThreadsConfig(_Section):
    """Thread pools of the node as a whole (``gpu.threads``); 0 = the profile's size.
    ``budget`` (default): 1 thread per call below 16 cores, no spin-waiting. ``legacy``: the
    libraries' own defaults, each sized to the machine (for side-by-side benchmarks).
    ONNX Runtime's intra-op threads are ``engine.runner_threads``."""

    profile: Literal["budget", "legacy"] = "budget"
    opencv: int = Field(0, ge=0, le=64)
    codec: int = Field(0, ge=0, le=16)  # per libavcodec/x264 context
    torch: int = Field(0, ge=0, le=64)

    def budget(self, runner_threads: int = 0) -> ThreadBudget:
        return ThreadBudget.of(self.profile, runner_threads=runner_threads, opencv_threads=self.opencv,
                               codec_threads=self.codec, torch_threads=self.torch)


class ProvenanceConfig(_Section):
    """What marks the node's output as synthetic: an invisible watermark in every swapped
    frame (on by default) and, with a certificate, signed C2PA Content Credentials on files.
    ``key`` (env ``SWAPCAST_PROVENANCE__KEY``) is never printed or logged; unset, the public
    default key is used, which anyone can verify with."""

    watermark: bool = True
    key: SecretStr | None = Field(None, description="watermark key; unset = swapcast's public key")
    strength: float = Field(3.0, gt=0, le=8, description="RMS of the mark in luma code values (3 ~ 42 dB PSNR)")
    issuer: int = Field(0, ge=0, le=65535, description="number carried by the watermark")
    issuer_name: str = Field("swapcast", min_length=1, max_length=200, description="issuer named in C2PA manifests")
    c2pa_cert: Path | None = Field(None, description="PEM signing certificate followed by its chain")
    c2pa_key: Path | None = Field(None, description="PEM private key of c2pa_cert")
    c2pa_trust_anchors: Path | None = Field(None, description="PEM CA certificates the verifier trusts")

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> ProvenanceConfig:
        if (self.c2pa_cert is None) != (self.c2pa_key is None):
            raise ValueError("c2pa_cert and c2pa_key go together")
        return self

    def settings(self):
        from streamer.provenance.marker import PUBLIC_KEY, ProvenanceSettings

        key = self.key.get_secret_value().encode() if self.key is not None and self.key.get_secret_value() else PUBLIC_KEY
        return ProvenanceSettings(
            watermark=self.watermark, key=key, strength=self.strength, issuer=self.issuer, issuer_name=self.issuer_name,
            c2pa_cert=self.c2pa_cert, c2pa_key=self.c2pa_key, c2pa_trust_anchors=self.c2pa_trust_anchors,
        )


class Config(_Section):
    engine: EngineConfig = EngineConfig()
    threads: ThreadsConfig = ThreadsConfig()
    swap: SwapConfig = SwapConfig()
    encode: EncodeConfig = EncodeConfig()
    server: ServerConfig = ServerConfig()
    tls: TlsConfig = TlsConfig()
    live: LiveConfig = LiveConfig()
    rtmp: RtmpConfig = RtmpConfig()
    push: PushConfig = PushConfig()
    webrtc: WebRtcConfig = WebRtcConfig()
    cluster: ClusterConfig = ClusterConfig()
    jobs: JobsConfig = JobsConfig()
    auth: AuthConfig = AuthConfig()
    quotas: QuotasConfig = QuotasConfig()
    provenance: ProvenanceConfig = ProvenanceConfig()

    def file_data(self) -> dict[str, Any]:
        """This config as a config file for a child process holds it (JSON types, secrets in
        the clear): a plain JSON dump masks secrets, which the child would take for the secret."""
        data = self.model_dump(mode="json")
        if self.provenance.key is not None:
            data["provenance"]["key"] = self.provenance.key.get_secret_value()
        return data


class ConfigError(SwapcastError):
    """The configuration file, environment or flags hold an invalid value."""


def load_config(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Build the configuration from defaults, file, environment and flag ``overrides``
    (nested dicts, e.g. ``{"swap": {"blend": 0.5}}``; ``None`` values are ignored)."""
    environ = os.environ if environ is None else environ
    path = path or environ.get(CONFIG_ENV)
    merged: dict[str, Any] = {}
    source = "defaults"
    if path:
        merged = _deep_merge(merged, _read_yaml(Path(path)))
        source = str(path)
    merged = _deep_merge(merged, _from_environment(environ))
    merged = _deep_merge(merged, _drop_none(overrides or {}))
    try:
        return Config.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"invalid configuration ({source} + environment + flags): {problems}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections, not {type(data).__name__}")
    return data


def _from_environment(environ: Mapping[str, str]) -> dict[str, Any]:
    """``SWAPCAST_SECTION__KEY=value`` -> {"section": {"key": value}}; values are parsed as YAML
    scalars so ``true``, ``8`` and ``0.5`` arrive typed. Names without ``__`` belong to
    tools (``SWAPCAST_CHROMIUM``, ``SWAPCAST_TOKEN``, ...), except a section name followed by
    a single ``_``, which is a typo of the config form and an error."""
    result: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        if "__" not in rest:
            section = next((s for s in Config.model_fields if rest.startswith(s + "_")), None)
            if section is not None:
                raise ConfigError(f"environment variable {name}: expected SWAPCAST_{section.upper()}__"
                                  f"{rest[len(section) + 1:].upper()} (two underscores between section and key)")
            continue
        keys = rest.split("__")
        if not all(keys):
            raise ConfigError(f"environment variable {name}: expected SWAPCAST_<SECTION>__<KEY>")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        target = result
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    return result


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: _drop_none(value) if isinstance(value, Mapping) else value
        for key, value in values.items()
        if value is not None
    }
