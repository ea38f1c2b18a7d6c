"""The Bay API's request bodies, as the `shipyard_neo_sdk` client sends them. Strict like the
bot API's (a field the call does not know is a 400 naming it); the fields the SDK sends for
Bay's execution history (`description`, `tags`, `include_code`) are taken, and only
`include_code` is acted on."""

from typing import Annotated

from ninja import Field

from sandboxes.schemas.common import NO_NUL, WHOLE, Input

Seconds = Annotated[int, Field(ge=1, le=86400 * 366), WHOLE]
Timeout = Annotated[int, Field(ge=1, le=3600), WHOLE]
Path = Annotated[str, Field(min_length=1, max_length=4096, pattern=NO_NUL)]


class CreateIn(Input):
    profile: str = Field("python-default", max_length=100)
    cargo_id: str | None = Field(None, min_length=1, max_length=512, pattern=NO_NUL)
    ttl: Annotated[int, Field(ge=0, le=86400 * 366), WHOLE] | None = Field(
        None, description="Seconds the sandbox lives; 0 or none: the pipeline's own ceiling."
    )


class ExtendIn(Input):
    extend_by: Seconds


class History(Input):
    description: str | None = None
    tags: str | None = None


class ShellIn(History):
    command: str = Field(..., min_length=1, pattern=NO_NUL)
    timeout: Timeout = 30
    cwd: Path | None = None
    include_code: bool = False


class PythonIn(History):
    code: str = Field(..., pattern=NO_NUL)
    timeout: Timeout = 30
    include_code: bool = False


class BrowserIn(History):
    """Taken whole, so the refusal says the capability is missing rather than a field."""

    model_config = {"extra": "allow"}


class FileIn(Input):
    path: Path
    content: str
