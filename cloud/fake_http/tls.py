"""The self-signed certificate of the fakes' HTTPS (Azure ML's bearer tokens need TLS)."""

from __future__ import annotations

import os


def _is_ip(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def self_signed_cert(directory: str) -> tuple[str, str]:
    """A self-signed certificate for this machine: (cert.pem, key.pem) in ``directory``.

    Valid for 127.0.0.1, localhost, ``host.docker.internal`` (how Airflow's containers reach
    the stack in docker compose's ``emulated`` profile) and ``$STEPOP_CLOUD_HOST`` when set.
    Clients trust it with ``REQUESTS_CA_BUNDLE=<cert.pem>`` or ``connection_verify=<cert.pem>``.
    Reused when already there for the same names (the directory may be a kept volume).
    """
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    names = {"127.0.0.1", "localhost", "host.docker.internal", os.environ.get("STEPOP_CLOUD_HOST")}
    alternatives = [
        x509.IPAddress(ipaddress.ip_address(name)) if _is_ip(name) else x509.DNSName(name)
        for name in sorted(filter(None, names))
    ]

    os.makedirs(directory, exist_ok=True)
    cert_path = os.path.join(directory, "cert.pem")
    key_path = os.path.join(directory, "key.pem")
    if os.path.exists(cert_path) and os.path.exists(key_path):
        with open(cert_path, "rb") as f:
            existing = x509.load_pem_x509_certificate(f.read())
        san = existing.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if set(san) == set(alternatives):
            return cert_path, key_path
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stepop fake cloud")])
    now = datetime.datetime.now(datetime.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(
            x509.SubjectAlternativeName(alternatives),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    tmp_key = key_path + ".tmp"
    with open(tmp_key, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    tmp_cert = cert_path + ".tmp"
    with open(tmp_cert, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    os.replace(tmp_key, key_path)
    os.replace(tmp_cert, cert_path)
    return cert_path, key_path
