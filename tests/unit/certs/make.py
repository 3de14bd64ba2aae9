#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Makes the certificates the unit tests load (tests/unit/certs/*.pem), with
Python's cryptography package: two CAs, and node certificates for the fake
wires' address (192.0.2.1, tests/unit/fake_transport.h) valid until 2125,
one expired, one for another address, and some that are no node's (a CA's,
usages that do not allow a node's handshake, a name with control bytes). Test material only: committed so the
unit tests need no generator. Run again only to change them."""

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HERE = Path(__file__).resolve().parent
START = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
END = datetime.datetime(2125, 1, 1, tzinfo=datetime.timezone.utc)


def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def write_key(path, key):
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def ca(tag):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(name(f"test CA {tag}")).issuer_name(name(f"test CA {tag}"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(START).not_valid_after(END)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (HERE / f"ca-{tag}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert


def usage(digital_signature=True, key_encipherment=False):
    return x509.KeyUsage(digital_signature=digital_signature, key_encipherment=key_encipherment,
                         content_commitment=False, data_encipherment=False, key_agreement=False,
                         key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False)


def node(file, cn, ca_key, ca_cert, ips=("192.0.2.1",), start=START, end=END, extensions=()):
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(i)) for i in ips]),
                              critical=False))
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    cert = builder.sign(ca_key, hashes.SHA256())
    (HERE / f"{file}.crt.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_key(HERE / f"{file}.key.pem", key)


a_key, a_cert = ca("a")
b_key, b_cert = ca("b")
node("dialer", "dialer", a_key, a_cert)
node("acceptor", "acceptor", a_key, a_cert)
node("acceptor-other-ca", "acceptor", b_key, b_cert)
node("acceptor-elsewhere", "acceptor", a_key, a_cert, ips=("198.51.100.7",))
node("dialer-expired", "dialer", a_key, a_cert, start=START, end=datetime.datetime(2025, 6, 1, tzinfo=datetime.timezone.utc))
# What is no node certificate (NodeCredentials::check_certificate), and a
# node certificate with every usage written out.
SERVER, CLIENT = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
node("dialer-is-a-ca", "dialer", a_key, a_cert,
     extensions=[(x509.BasicConstraints(ca=True, path_length=None), True)])
node("dialer-server-only", "dialer", a_key, a_cert, extensions=[(x509.ExtendedKeyUsage([SERVER]), False)])
node("dialer-cannot-sign", "dialer", a_key, a_cert,
     extensions=[(usage(digital_signature=False, key_encipherment=True), True)])
node("dialer-bad-name", "x\x1b]0;pwned\x07", a_key, a_cert)
node("dialer-with-usages", "dialer", a_key, a_cert,
     extensions=[(x509.BasicConstraints(ca=False, path_length=None), True), (usage(), True),
                 (x509.ExtendedKeyUsage([SERVER, CLIENT]), False)])
