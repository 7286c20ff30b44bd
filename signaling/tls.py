"""TLS for every listener of a node or gateway: HTTPS, RTMPS, and the plain-HTTP port that
only redirects to HTTPS.

One ``ssl.SSLContext`` (TLS 1.2 or newer) serves the HTTP and RTMP listeners alike.
``CertificateReloader`` loads a renewed certificate into that same context on SIGHUP: every
handshake after it presents the new certificate, connections already open keep theirs, so no
session drops. A certificate that cannot be used (missing, not PEM, expired, not matching its
key) is a ``TlsError`` naming the file, at start; at a reload it is logged and the old one
stays. A client whose handshake fails only loses its own connection (asyncio ends that
transport alone).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import signal
import ssl
from pathlib import Path

from aiohttp import web
from cryptography import x509

from gpu.errors import SwapcastError
from signaling.connection_limits import ConnectionLimits, GuardedSite, guard_app

log = logging.getLogger(__name__)

MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2


class TlsError(SwapcastError):
    """A certificate or key that cannot be served; the message names the file."""


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server context (TLS >= 1.2) holding ``cert_file`` (PEM, chain allowed) and ``key_file``."""
    context = _bare_server_context()
    _load(context, cert_file, key_file)
    return context


def client_context(ca_file: Path | None = None) -> ssl.SSLContext:
    """A context that verifies servers (hostname and chain) against ``ca_file`` or, without
    it, the system's CAs: what pushes to ``rtmps://`` destinations use."""
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"CA bundle {ca_file}: cannot be used: {_reason(exc)}") from None
    context.minimum_version = MINIMUM_VERSION
    return context


def _bare_server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MINIMUM_VERSION
    return context


def _load(context: ssl.SSLContext, cert_file: Path, key_file: Path) -> None:
    """Check the pair on a scratch context first, so a bad pair never half-replaces a good one."""
    _check_certificate(Path(cert_file))

    def no_password() -> str:  # OpenSSL would otherwise prompt on the terminal, and hang a service
        raise TlsError(f"TLS key file {key_file}: encrypted with a passphrase; give the server an unencrypted key")

    for candidate in (_bare_server_context(), context):
        try:
            candidate.load_cert_chain(str(cert_file), str(key_file), password=no_password)
        except FileNotFoundError:
            raise TlsError(f"TLS key file {key_file}: not found") from None
        except (OSError, ssl.SSLError) as exc:
            if "KEY_VALUES_MISMATCH" in str(exc):
                raise TlsError(f"TLS key file {key_file}: does not match the certificate {cert_file}") from None
            what = "not a PEM private key" if "PEM lib" in str(exc) else f"cannot be used ({_reason(exc)})"
            raise TlsError(f"TLS key file {key_file}: {what}") from None


def _check_certificate(cert_file: Path) -> None:
    try:
        certificates = x509.load_pem_x509_certificates(cert_file.read_bytes())
    except OSError as exc:
        raise TlsError(f"TLS certificate file {cert_file}: cannot be read ({exc.strerror or exc})") from None
    except ValueError:
        raise TlsError(f"TLS certificate file {cert_file}: not a PEM certificate") from None
    leaf = certificates[0]
    now = datetime.datetime.now(datetime.UTC)
    if leaf.not_valid_after_utc <= now:
        raise TlsError(f"TLS certificate file {cert_file}: expired on {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    if leaf.not_valid_before_utc > now:
        raise TlsError(f"TLS certificate file {cert_file}: not valid before {leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")


def _reason(exc: Exception) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)


class CertificateReloader:
    """Loads ``cert_file``/``key_file`` again into the live context, e.g. on SIGHUP after a
    renewal; a failed reload keeps serving the previous certificate."""

    def __init__(self, context: ssl.SSLContext, cert_file: Path, key_file: Path) -> None:
        self.context = context
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.reloads = 0

    def reload(self) -> bool:
        try:
            _load(self.context, self.cert_file, self.key_file)
        except TlsError as exc:
            log.error("tls: certificate not reloaded, still serving the previous one: %s", exc)
            return False
        self.reloads += 1
        log.info("tls: certificate reloaded from %s", self.cert_file)
        return True

    def reload_on_sighup(self, app: web.Application) -> None:
        """While ``app`` runs, SIGHUP reloads the certificate."""

        async def install(_: web.Application) -> None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.reload)

        async def remove(_: web.Application) -> None:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)

        app.on_startup.append(install)
        app.on_cleanup.append(remove)


def serve_https_redirect(app: web.Application, host: str, port: int, https_port: int,
                         limits: ConnectionLimits | None = None) -> None:
    """While ``app`` runs, a plain-HTTP listener on ``port`` answers every request with a
    308 to the same path over HTTPS (the method and body are kept); ``limits`` bound its
    connections per address as on the main listener (slowloris on the redirect port)."""
    runner: web.AppRunner | None = None

    async def to_https(request: web.Request) -> web.Response:
        url = request.url.with_scheme("https").with_port(None if https_port == 443 else https_port)
        raise web.HTTPPermanentRedirect(url)

    async def start(_: web.Application) -> None:
        nonlocal runner
        redirect = web.Application()
        redirect.router.add_route("*", "/{tail:.*}", to_https)
        guard = guard_app(redirect, limits) if limits is not None else None
        runner = web.AppRunner(redirect, access_log=None)
        await runner.setup()
        site = GuardedSite(runner, host, port, guard=guard) if guard is not None else web.TCPSite(runner, host, port)
        await site.start()

    async def stop(_: web.Application) -> None:
        if runner is not None:
            await runner.cleanup()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
