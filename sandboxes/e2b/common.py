"""What both halves of the E2B-compatible API share: the control plane (`/e2b`) hands a sandbox's
access token and its agent's version to the SDK, and the sandbox API (`/e2b/sandbox`) checks the
token on every call; the traffic token, likewise derived, opens the code interpreter's port.

An E2B sandbox is a Boxyard sandbox; its id is the sandbox's id. The access token is derived
from the server's secret and the id, so it needs no row, cannot be guessed from the id, and is
the same in every web process."""

import hashlib
import hmac
from uuid import UUID

from django.conf import settings

# The envd version the sandbox API speaks; the SDK turns features on and off by it. 0.5.2:
# commands with stdin (0.3.0), the default user (0.4.0), closing stdin (0.5.2). Not yet 0.5.7,
# whose SDK sends streamed uploads as chunked raw bodies that say no size, nor the file
# metadata (0.6.2) and the watch events' entries (0.6.3) that come after it.
ENVD_VERSION = "0.5.2"


def envd_token(sandbox_id: UUID | str) -> str:
    """The secret that opens one sandbox's API (`X-Access-Token`)."""
    message = f"boxyard.e2b.envd:{sandbox_id}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


def envd_token_matches(sandbox_id: UUID | str, token: str | None) -> bool:
    return bool(token) and hmac.compare_digest(envd_token(sandbox_id), token or "")


def traffic_token(sandbox_id: UUID | str) -> str:
    """The secret that opens the sandbox's other ports (`E2B-Traffic-Access-Token`): the code
    interpreter's (49999), whose context calls the SDK sends without the access token."""
    message = f"boxyard.e2b.traffic:{sandbox_id}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


def traffic_token_matches(sandbox_id: UUID | str, token: str | None) -> bool:
    return bool(token) and hmac.compare_digest(traffic_token(sandbox_id), token or "")
