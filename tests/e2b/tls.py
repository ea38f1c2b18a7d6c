"""TLS in front of a served Boxyard, as an operator's proxy puts it there: a certificate
authority of the test's own, a wildcard certificate it signs, and a terminator that takes TLS
on a port of 127.0.0.1 and hands the plain bytes to the server."""

import asyncio
import datetime
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class Certificates:
    authority: Path  # what the client trusts (SSL_CERT_FILE)
    chain: Path  # the server's certificate
    key: Path  # and its key


def wildcard_certificates(folder: Path, domain: str) -> Certificates:
    """An authority and a certificate it signs for `domain` and `*.<domain>`."""
    now = datetime.datetime.now(datetime.UTC)
    authority_key = ec.generate_private_key(ec.SECP256R1())
    authority_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Boxyard test CA")])
    authority = (
        x509.CertificateBuilder()
        .subject_name(authority_name)
        .issuer_name(authority_name)
        .public_key(authority_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(authority_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain)]))
        .issuer_name(authority_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(domain), x509.DNSName(f"*.{domain}")]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(authority_key, hashes.SHA256())
    )
    made = Certificates(folder / "authority.pem", folder / "chain.pem", folder / "key.pem")
    made.authority.write_bytes(authority.public_bytes(serialization.Encoding.PEM))
    made.chain.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    made.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return made


@contextmanager
def terminated(certificates: Certificates, upstream_port: int) -> Iterator[int]:
    """TLS on a free port of 127.0.0.1 (HTTP/1.1 by ALPN, as the server speaks), each
    connection relayed to `upstream_port`; yields the port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificates.chain, certificates.key)
    context.set_alpn_protocols(["http/1.1"])
    loop = asyncio.new_event_loop()
    open_writers: set[asyncio.StreamWriter] = set()

    async def relay(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with suppress(ConnectionError, ssl.SSLError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        with suppress(ConnectionError, OSError, RuntimeError):
            sink.close()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        except OSError:
            writer.close()
            return
        open_writers.update((writer, up_writer))
        try:
            await asyncio.gather(relay(reader, up_writer), relay(up_reader, writer))
        finally:
            open_writers.difference_update((writer, up_writer))

    server = loop.run_until_complete(asyncio.start_server(connection, "127.0.0.1", 0, ssl=context))
    thread = threading.Thread(target=loop.run_forever, name="tls-terminator", daemon=True)
    thread.start()
    try:
        yield server.sockets[0].getsockname()[1]
    finally:

        async def stop() -> None:
            server.close()
            for writer in list(open_writers):
                writer.close()
            await server.wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
