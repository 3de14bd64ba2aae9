# SPDX-License-Identifier: Apache-2.0
"""A fleet's certificates for tunnel.auth.mode cert, made with Python's
cryptography package (Debian's python3-cryptography): a CA, and per node a
private key and a certificate whose common name is the node's name and whose
IP subject alternative names are its tunnel addresses. Validity, issuer and
names can be bent to make each bad case. Files are written with the modes
rdmagw requires (the key 0400)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = datetime.datetime.now(datetime.timezone.utc)
DAY = datetime.timedelta(days=1)


class Authority:
    """A CA: signs node certificates; its certificate goes into ca_files."""

    def __init__(self, directory: Path, name: str = "rdmagw fleet CA"):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.name = subject
        self.cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(NOW - DAY).not_valid_after(NOW + 365 * DAY)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.path = self.directory / f"ca-{abs(hash(name)) % 100000}.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def node(self, node: str, addresses=("127.0.0.1",), *, not_before=None, not_after=None,
             tag: str = "", ca: bool = False, eku=()) -> tuple[str, str]:
        """(cert_file, key_file) of a node certificate; `ca`: with
        basicConstraints CA:TRUE (which no node certificate has), `eku`: an
        extendedKeyUsage of these ("server", "client")."""
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node)]))
                   .issuer_name(self.name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(not_before or NOW - DAY).not_valid_after(not_after or NOW + 30 * DAY))
        if addresses:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]),
                critical=False)
        if ca:
            builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        if eku:
            usages = {"server": ExtendedKeyUsageOID.SERVER_AUTH, "client": ExtendedKeyUsageOID.CLIENT_AUTH}
            builder = builder.add_extension(x509.ExtendedKeyUsage([usages[u] for u in eku]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        base = self.directory / f"{node}{tag}"
        cert_path, key_path = Path(f"{base}.crt"), Path(f"{base}.key")
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        if key_path.exists():
            os.chmod(key_path, 0o600)
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        os.chmod(key_path, 0o400)
        return str(cert_path), str(key_path)


def cert_auth(ca_files, cert_file: str, key_file: str, encrypt: bool = False) -> str:
    """The tunnel.auth section, for render_config's `auth`."""
    lines = ["  auth:", "    mode: cert", f"    ca_files: [{', '.join(str(c) for c in ca_files)}]",
             f"    cert_file: {cert_file}", f"    key_file: {key_file}"]
    return "\n".join(lines + (["    encrypt: true"] if encrypt else [])) + "\n"
