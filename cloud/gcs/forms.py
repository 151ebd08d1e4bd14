"""A form upload under a V4 POST policy, checked as GCS checks it.

https://cloud.google.com/storage/docs/xml-api/post-object-forms: the form carries ``key``, the
base64 ``policy``, ``x-goog-algorithm``, ``x-goog-credential``, ``x-goog-date``,
``x-goog-signature`` (hex RSA-SHA256 of the base64 policy) and the ``file`` last. Every
condition of the policy must hold, and every field but the signature, the policy, the file
and ``x-ignore-*`` must be named by one.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import email.parser
import email.policy
import json
from typing import Any


class FormRefused(Exception):
    """What GCS would answer instead of storing: an HTTP status and its error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


UNSIGNED = ("policy", "x-goog-signature", "file")


def parse(content_type: str, body: bytes) -> dict[str, bytes]:
    """The form's fields by name (the file's bytes under ``file``)."""
    if not content_type.startswith("multipart/form-data"):
        raise FormRefused(400, "InvalidArgument", f"not a form upload: {content_type!r}")
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            fields[str(name)] = part.get_payload(decode=True) or b""
    return fields


def check(fields: dict[str, bytes], bucket: str, public_key: Any, email_: str) -> None:
    """Raise :class:`FormRefused` unless the form is one the policy signed and allows."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    text = {name: value.decode(errors="replace") for name, value in fields.items()
            if name != "file"}  # fmt: skip
    for name in ("key", "policy", "x-goog-algorithm", "x-goog-credential", "x-goog-signature"):
        if name not in text:
            raise FormRefused(400, "InvalidArgument", f"the form has no {name} field")
    if text["x-goog-algorithm"] != "GOOG4-RSA-SHA256":
        raise FormRefused(400, "InvalidPolicyDocument", "x-goog-algorithm is not GOOG4-RSA-SHA256")
    if text["x-goog-credential"].split("/", 1)[0] != email_:
        raise FormRefused(403, "AccessDenied", "the credential is not the stack's signer")
    try:
        signature = binascii.unhexlify(text["x-goog-signature"])
        public_key.verify(signature, fields["policy"], padding.PKCS1v15(), hashes.SHA256())
    except (binascii.Error, InvalidSignature) as exc:
        raise FormRefused(
            403, "SignatureDoesNotMatch", "the policy's signature does not match"
        ) from exc
    policy = json.loads(base64.b64decode(fields["policy"]))
    expires = datetime.datetime.strptime(policy["expiration"], "%Y-%m-%dT%H:%M:%SZ")
    if expires.replace(tzinfo=datetime.UTC) < datetime.datetime.now(datetime.UTC):
        raise FormRefused(400, "InvalidPolicyDocument", "the policy has expired")
    named = {"bucket"}
    for condition in policy["conditions"]:
        named.add(_holds(condition, text, bucket, len(fields.get("file", b""))))
    extra = [name for name in text if name not in named and name not in UNSIGNED
             and not name.startswith("x-ignore-")]  # fmt: skip
    if extra:
        raise FormRefused(400, "InvalidPolicyDocument", f"fields no condition names: {extra}")


def _holds(condition: Any, text: dict[str, str], bucket: str, size: int) -> str:
    """Check one condition; the field it names."""
    if isinstance(condition, dict):
        ((name, value),) = condition.items()
        actual = bucket if name == "bucket" else text.get(name)
        if actual != value:
            raise FormRefused(400, "InvalidPolicyDocument", f"{name} is not {value!r}")
        return name
    operator, *args = condition
    if operator == "content-length-range":
        low, high = args
        if not low <= size <= high:
            raise FormRefused(400, "EntityTooLarge", f"{size} bytes is outside [{low}, {high}]")
        return "file"
    name, value = args[0].removeprefix("$"), args[1]
    actual = bucket if name == "bucket" else text.get(name, "")
    if operator == "starts-with" and actual.startswith(value):
        return name
    if operator == "eq" and actual == value:
        return name
    raise FormRefused(403, "AccessDenied", f"{name} {actual!r} fails [{operator}, {value!r}]")
