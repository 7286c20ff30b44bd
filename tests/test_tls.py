"""signaling/tls.py with real TLS clients on 127.0.0.1: certificates that cannot be served are
refused naming the file; a client whose handshake fails (plain text, TLS 1.1, an untrusted
server) never disturbs another connection; SIGHUP reloads the certificate for new
handshakes while an open keep-alive connection goes on; the plain port only redirects.
``swapcast gateway`` serves HTTPS, RTMPS and the redirect with the TLS flags."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from tls_testkit import ThrowawayCA, free_port, replace_files

from signaling.tls import CertificateReloader, TlsError, client_context, serve_https_redirect, server_context

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> ThrowawayCA:
    return ThrowawayCA(tmp_path_factory.mktemp("pki"))


def test_unusable_certificates_are_refused_naming_the_file(ca, tmp_path):
    good, other = ca.issue("good"), ca.issue("other")
    expired = ca.issue("expired", expired=True)
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(serialization.load_pem_private_key(good.key.read_bytes(), None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"passphrase")))
    cases = [
        (expired.cert, expired.key, f"TLS certificate file {expired.cert}: expired on "),
        (not_pem, good.key, f"TLS certificate file {not_pem}: not a PEM certificate"),
        (tmp_path / "missing.crt", good.key, f"TLS certificate file {tmp_path / 'missing.crt'}: cannot be read"),
        (good.cert, tmp_path / "missing.key", f"TLS key file {tmp_path / 'missing.key'}: not found"),
        (good.cert, other.key, f"TLS key file {other.key}: does not match the certificate {good.cert}"),
        (good.cert, good.cert, f"TLS key file {good.cert}: not a PEM private key"),
        (good.cert, encrypted, f"TLS key file {encrypted}: encrypted with a passphrase"),
    ]
    for cert, key, message in cases:
        with pytest.raises(TlsError) as caught:
            server_context(cert, key)
        assert str(caught.value).startswith(message), str(caught.value)
        assert "\n" not in str(caught.value)
    context = server_context(good.cert, good.key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


@pytest.mark.slow
def test_serve_with_an_expired_certificate_exits_with_one_line(ca, tmp_path):
    expired = ca.issue("expired-cli", expired=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPCAST_")}
    result = subprocess.run([sys.executable, "-m", "swapcast.cli", "serve", "--port", str(free_port()),
                             "--tls-cert", str(expired.cert), "--tls-key", str(expired.key)],
                            env={**env, "SWAPCAST_SERVER__DATA_DIR": str(tmp_path)}, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(expired.cert) in lines[0] and "expired" in lines[0], result.stderr


def _tls_socket(port: int, ca: Path) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(ca))
    return context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="127.0.0.1")


def _serial(tls: ssl.SSLSocket) -> int:
    from cryptography import x509

    return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def _get(tls: ssl.SSLSocket, path: str = "/hello") -> bytes:
    """One keep-alive HTTP/1.1 request on an open connection; the whole response."""
    tls.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data or not data.endswith(b"hello"):
        chunk = tls.recv(4096)
        assert chunk, data
        data += chunk
    return data


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_failed_handshakes_do_not_disturb_others_and_sighup_reloads_for_new_handshakes(ca, tmp_path, caplog):
    first, renewed = ca.issue("first"), ca.issue("renewed")
    live = ca.issue("live")
    replace_files(first, live)
    port, redirect_port = free_port(), free_port()

    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def scenario():
        context = server_context(live.cert, live.key)
        app = web.Application()
        app.router.add_get("/hello", hello)
        CertificateReloader(context, live.cert, live.key).reload_on_sighup(app)
        serve_https_redirect(app, "127.0.0.1", redirect_port, port)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
        try:
            await asyncio.to_thread(clients)
        finally:
            await runner.cleanup()

    def clients():
        kept = _tls_socket(port, ca.path)
        assert _serial(kept) == first.serial
        assert b" 200 " in _get(kept)

        # handshakes that fail: plain text on the TLS port, a TLS 1.1-only client, a client
        # that does not trust the server
        with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:
            plain.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"hello" not in plain.recv(4096)
        old_client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old_client.check_hostname, old_client.verify_mode = False, ssl.CERT_NONE
        old_client.minimum_version = old_client.maximum_version = ssl.TLSVersion.TLSv1_1
        old_client.set_ciphers("DEFAULT:@SECLEVEL=0")  # this client offers TLS 1.1 for real: the server says no
        with pytest.raises(ssl.SSLError), socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            old_client.wrap_socket(raw)
        with pytest.raises(ssl.SSLCertVerificationError), socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            ssl.create_default_context().wrap_socket(raw, server_hostname="127.0.0.1")
        assert b" 200 " in _get(kept)  # the open connection did not notice

        # a renewal in place, then SIGHUP: new handshakes get it, the open connection goes on
        replace_files(renewed, live)
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(50):
            with _tls_socket(port, ca.path) as fresh:
                if _serial(fresh) == renewed.serial:
                    break
        else:
            raise AssertionError("SIGHUP did not reload the certificate")
        assert b" 200 " in _get(kept) and _serial(kept) == first.serial

        # a broken renewal is refused and the previous certificate stays
        live.key.write_text("not a key\n")
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(50):
            if "certificate not reloaded" in caplog.text:
                break
            time.sleep(0.05)
        with _tls_socket(port, ca.path) as fresh:
            assert _serial(fresh) == renewed.serial and b" 200 " in _get(fresh)
        kept.close()

        # the plain port only redirects, path and query kept
        with socket.create_connection(("127.0.0.1", redirect_port), timeout=5) as plain:
            plain.sendall(b"POST /hello?x=1 HTTP/1.1\r\nHost: 127.0.0.1:" + str(redirect_port).encode()
                          + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := plain.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 308 ") and f"Location: https://127.0.0.1:{port}/hello?x=1\r\n".encode() in answer

    caplog.set_level("INFO", "signaling.tls")
    asyncio.run(scenario())
    assert "tls: certificate reloaded" in caplog.text


def test_client_context_verifies_against_the_given_ca_bundle(ca, tmp_path):
    assert client_context(ca.path).verify_mode == ssl.CERT_REQUIRED
    bad = tmp_path / "bundle.pem"
    bad.write_text("nonsense\n")
    with pytest.raises(TlsError, match=f"CA bundle {bad}"):
        client_context(bad)


@pytest.mark.slow
def test_gateway_serves_https_rtmps_and_the_redirect(ca, redis_url, tmp_path):
    """``swapcast gateway`` with the TLS flags, as an operator runs it in front of nodes."""
    leaf = ca.issue("gateway")
    port, redirect_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPCAST_")}
    env.update(SWAPCAST_AUTH__JWT_SECRET="gateway-tls-test-" + "g" * 32, SWAPCAST_SERVER__DATA_DIR=str(tmp_path))
    process = subprocess.Popen(
        [sys.executable, "-m", "swapcast.cli", "gateway", "--redis", redis_url, "--port", str(port), "--rtmp-port", "0",
         "--rtmps-port", "0", "--http-redirect-port", str(redirect_port), "--tls-cert", str(leaf.cert),
         "--tls-key", str(leaf.key)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    try:
        announced = ""
        while "Ctrl+C" not in announced:
            line = process.stdout.readline()
            assert line, f"the gateway ended: {announced}"
            announced += line
        assert f"https://127.0.0.1:{port}/" in announced and "rtmps://127.0.0.1:" in announced, announced
        rtmps_port = int(announced.split("rtmps://127.0.0.1:", 1)[1].split("/", 1)[0])
        with _tls_socket(port, ca.path) as tls:
            assert _serial(tls) == leaf.serial
            answer = b""
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            while chunk := tls.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 "), answer
        with _tls_socket(rtmps_port, ca.path) as tls:  # RTMPS: the same certificate
            assert _serial(tls) == leaf.serial
        with socket.create_connection(("127.0.0.1", redirect_port), timeout=5) as plain:
            plain.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert plain.recv(4096).startswith(b"HTTP/1.1 308 ")
    finally:
        process.terminate()
        process.wait(10)


def test_a_cluster_node_refuses_a_certificate_and_names_the_gateway(ca, monkeypatch):
    from swapcast.cli import build_parser
    from swapcast.config import ConfigError

    leaf = ca.issue("cluster-node")
    monkeypatch.setenv("SWAPCAST_AUTH__JWT_SECRET", "cluster-tls-test-" + "c" * 32)
    args = build_parser().parse_args(["serve", "--redis", "redis://127.0.0.1:1/0", "--tls-cert", str(leaf.cert),
                                      "--tls-key", str(leaf.key)])
    with pytest.raises(ConfigError, match="give the certificate to `swapcast gateway`"):
        args.run(args)


def test_the_redirect_port_caps_connections_per_address():
    from signaling.connection_limits import ConnectionLimits

    redirect_port = free_port()

    async def scenario():
        app = web.Application()
        serve_https_redirect(app, "127.0.0.1", redirect_port, 8443, ConnectionLimits(max_per_ip=2))
        runner = web.AppRunner(app)
        await runner.setup()  # runs the redirect's startup hook: its listener is up
        try:
            await asyncio.to_thread(clients)
        finally:
            await runner.cleanup()

    def redirect_status(sock: socket.socket) -> bytes:
        sock.sendall(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
        return sock.recv(4096).split(b"\r\n", 1)[0]

    def clients():
        held = [socket.create_connection(("127.0.0.1", redirect_port), timeout=5) for _ in range(2)]
        try:
            time.sleep(0.2)
            with socket.create_connection(("127.0.0.1", redirect_port), timeout=5) as third:
                try:  # over the cap: aborted at once, no answer
                    third.sendall(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
                    answer = third.recv(4096)
                except ConnectionResetError:
                    answer = b""
                assert answer == b""
            with socket.create_connection(("127.0.0.1", redirect_port), timeout=5,
                                          source_address=("127.0.0.2", 0)) as other:
                assert b"308" in redirect_status(other)  # another address is still served
            assert b"308" in redirect_status(held[0])  # and the held ones still work
        finally:
            for sock in held:
                sock.close()

    asyncio.run(scenario())
