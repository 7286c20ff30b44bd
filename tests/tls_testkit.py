"""What the TLS and TURN tests share: a throw-away certificate authority, the machine's own
non-loopback address, a real coturn ``turnserver`` on loopback (process_harness
starts and stops it), and what a client stalling a TLS handshake sends and reads."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import hashlib
import ipaddress
import os
import shutil
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from process_harness import ManagedProcess, running


def host_ip() -> str:
    """This machine's own non-loopback IPv4 address (the first interface that has one)."""
    import fcntl

    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:  # SIOCGIFADDR: the interface's IPv4 address
                raw = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on it
                continue
        address = socket.inet_ntoa(raw[20:24])
        if not ipaddress.ip_address(address).is_loopback:
            return address
    raise AssertionError("this machine has no non-loopback IPv4 address")


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


@dataclass
class Leaf:
    cert: Path
    key: Path
    spki_sha256: str  # base64, what Chromium's --ignore-certificate-errors-spki-list takes
    serial: int


class ThrowawayCA:
    """A CA made for one test run; ``issue`` signs server certificates for IPs and names."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.certificate = (
            x509.CertificateBuilder().subject_name(_name("swapcast test CA")).issuer_name(_name("swapcast test CA"))
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.path = self.directory / "ca.pem"
        self.path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, ips: tuple[str, ...] = ("127.0.0.1",), dns: tuple[str, ...] = ("localhost",),
              valid_for: datetime.timedelta = datetime.timedelta(days=1), expired: bool = False) -> Leaf:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = (now - datetime.timedelta(days=2), now - datetime.timedelta(days=1)) if expired else \
            (now - datetime.timedelta(minutes=5), now + valid_for)
        serial = x509.random_serial_number()
        alt_names = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips] + [x509.DNSName(d) for d in dns]
        certificate = (
            x509.CertificateBuilder().subject_name(_name(name)).issuer_name(self.certificate.subject)
            .public_key(key.public_key()).serial_number(serial).not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        cert_path, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM)
                              + self.certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        spki = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        return Leaf(cert_path, key_path, base64.b64encode(hashlib.sha256(spki).digest()).decode(), serial)


def replace_files(source: Leaf, target: Leaf) -> None:
    """Overwrite ``target``'s files with ``source``'s (a renewal in place)."""
    shutil.copyfile(source.cert, target.cert)
    shutil.copyfile(source.key, target.key)


def peer_certificate_serial(host: str, port: int, ca: Path, server_hostname: str | None = None) -> int:
    """The serial of the certificate a fresh TLS handshake with host:port presents."""
    import ssl

    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((host, port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=server_hostname or host) as tls:
        der = tls.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der).serial_number


TURNSERVER = shutil.which("turnserver") or "/usr/bin/turnserver"


@dataclass
class TurnServer:
    """A coturn ``turnserver`` on 127.0.0.1 with the REST-API shared secret."""

    port: int
    secret: str
    managed: ManagedProcess

    @property
    def url(self) -> str:
        return f"turn:127.0.0.1:{self.port}?transport=udp"

    def log(self) -> str:
        return self.managed.log()


TEST_OPTIONS = ("-n", "--use-auth-secret", "--realm=swapcast.test", "--no-tls", "--no-dtls", "--no-tcp", "--no-cli",
                "--allow-loopback-peers", "--log-file=stdout", "--simple-log")
PLACE_OPTIONS = ("--listening-ip", "--listening-port", "--relay-ip", "--min-port", "--max-port", "--db", "--pidfile")


@contextlib.contextmanager
def turn_server(directory: Path, secret: str, options: tuple[str, ...] = TEST_OPTIONS, timeout_s: float = 10.0):
    """``turnserver`` with ``options`` (a deployment's command line, say), but on 127.0.0.1,
    a free port, a small relay range and files in ``directory``."""
    assert Path(TURNSERVER).exists(), "turnserver not found (apt-get install coturn; scripts/bootstrap does)"
    port = free_port(socket.SOCK_DGRAM)
    relay_low = 40000 + (os.getpid() % 200) * 100  # a small relay range of its own
    kept = [o for o in options if o.split("=", 1)[0] not in PLACE_OPTIONS]
    secret_option = [] if any(o.startswith("--static-auth-secret=") for o in kept) else [f"--static-auth-secret={secret}"]
    command = [
        TURNSERVER, *kept, *secret_option, "--listening-ip=127.0.0.1", f"--listening-port={port}",
        "--relay-ip=127.0.0.1", f"--min-port={relay_low}", f"--max-port={relay_low + 99}",
        f"--db={directory / 'turndb'}", f"--pidfile={directory / 'turnserver.pid'}",
    ]
    with running("turnserver", command, directory / "turnserver.log", lambda: _answers_stun(port),
                 timeout_s=timeout_s, grace_s=5) as managed:
        yield TurnServer(port, secret, managed)


def _answers_stun(port: int) -> bool:
    """Whether a STUN Binding request to the port gets a success response."""
    request = struct.pack("!HHI", 0x0001, 0, 0x2112A442) + os.urandom(12)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.2)
        with contextlib.suppress(TimeoutError, OSError):
            sock.sendto(request, ("127.0.0.1", port))
            return sock.recv(2048)[:2] == b"\x01\x01"  # Binding success response
    return False


STALLED_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"  # a ClientHello's first bytes, never the rest


async def received_until_closed(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before closing (a reset counts as closed)."""
    received = b""
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(4096):
            received += chunk
    return received
