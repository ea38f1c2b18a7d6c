"""A file's contents as the JSON calls carry them: text, or base64 for binary (one of them:
a body is parsed by its schema, which cannot say "not both")."""

import base64
import binascii
from collections.abc import Iterable, Iterator

from boxyard.errors import N_, InvalidInput


def decode_contents(contents: str | None, contents_b64: str | None) -> bytes:
    if contents is not None and contents_b64 is not None:
        raise InvalidInput("contents", N_("give contents or contents_b64, not both"))
    if contents_b64 is not None:
        try:
            return base64.b64decode(contents_b64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput("contents_b64", N_("is not valid base64")) from None
    if contents is None:
        return b""
    return contents.encode("utf-8", errors="surrogatepass")


# Base64 is decoded this many characters at a time (a multiple of 4): a file written from
# contents_b64 is never held decoded as a whole beside its text.
_B64_SLICE = 1024 * 1024


def decoded_contents(contents: str | None, contents_b64: str | None) -> tuple[int, Iterable[bytes]]:
    """What decode_contents gives, as (size, chunks) decoded as they are written; bad input
    is refused here, before anything is written."""
    if contents is not None or contents_b64 is None:
        data = decode_contents(contents, contents_b64)
        return len(data), [data]
    try:
        size = sum(len(chunk) for chunk in _b64_chunks(contents_b64))
    except (binascii.Error, ValueError):
        raise InvalidInput("contents_b64", N_("is not valid base64")) from None
    return size, _b64_chunks(contents_b64)


def _b64_chunks(text: str) -> Iterator[bytes]:
    for start in range(0, len(text), _B64_SLICE):
        piece = text[start : start + _B64_SLICE]
        if start + _B64_SLICE < len(text) and piece.endswith("="):
            raise binascii.Error("padding before the end")
        yield base64.b64decode(piece, validate=True)
