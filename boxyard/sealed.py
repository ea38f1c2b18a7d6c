"""Sealed tokens: a small JSON object encrypted and authenticated (AES-256-GCM) with a key
derived from SECRET_KEY (HKDF-SHA256, one key per purpose), so that whoever holds a token
can neither read nor change what it says. A token sealed under an entry of
SECRET_KEY_FALLBACKS still opens, as Django's own signing allows while keys are rotated."""

import base64
import binascii
import json
import os
from functools import lru_cache
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

_NONCE_BYTES = 12
_TAG_BYTES = 16


class Unsealable(ValueError):
    """Not a token this server sealed for this purpose (changed, cut, or another's)."""


def seal(claims: dict[str, Any], purpose: str) -> str:
    """`claims` as an opaque URL-safe token for `purpose`."""
    plain = json.dumps(claims, separators=(",", ":")).encode()
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(_key(settings.SECRET_KEY, purpose)).encrypt(nonce, plain, purpose.encode())
    return _encoded(nonce + sealed)


def unseal(token: str, purpose: str) -> dict[str, Any]:
    """The claims of a token `seal` made for `purpose`, or Unsealable."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise Unsealable(token) from None
    if len(raw) < _NONCE_BYTES + _TAG_BYTES or _encoded(raw) != token:
        raise Unsealable(token)  # also a character changed in bits that decoding drops
    nonce, sealed = raw[:_NONCE_BYTES], raw[_NONCE_BYTES:]
    for secret in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]:
        try:
            plain = AESGCM(_key(secret, purpose)).decrypt(nonce, sealed, purpose.encode())
        except InvalidTag:
            continue
        claims = json.loads(plain)
        if not isinstance(claims, dict):
            raise Unsealable(token)
        return claims
    raise Unsealable(token)


def _encoded(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


@lru_cache(maxsize=16)
def _key(secret: str | bytes, purpose: str) -> bytes:
    material = secret.encode() if isinstance(secret, str) else secret
    derive = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"boxyard.sealed", info=purpose.encode()
    )
    return derive.derive(material)
