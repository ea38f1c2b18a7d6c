"""What runs in a sandbox besides its execs, as the bot API shows it: shell sessions and the
pipeline's managed processes."""

from typing import Annotated

from ninja import Field, Schema
from pydantic import ConfigDict, StringConstraints, WithJsonSchema

from sandboxes.models import SESSION_NAME
from sandboxes.schemas.common import B64, COUNT_MAX, Fencing, present
from sandboxes.schemas.execs import Chunk, Cwd, Env

# A session to end: any but default, which always exists (the service refuses it).
SessionToEnd = Annotated[
    str,
    StringConstraints(pattern=f"^{SESSION_NAME}$"),
    WithJsonSchema({"type": "string", "pattern": f"^{SESSION_NAME}$", "not": {"const": "default"}}),
]


class SessionIn(Fencing):
    name: str = Field(
        ...,
        pattern=f"^{SESSION_NAME}$",
        description="1-64 letters, digits, '.', '_' or '-', starting with a letter or digit.",
    )
    cwd: Cwd | None = Field(None, description="Starting directory; default /workspace.")
    env: Env | None = Field(None, description="Starting variables.")


class SessionOut(Schema):
    name: str
    cwd: str
    env: dict[str, str]
    busy: bool
    started: bool = Field(description="Whether its shell runs now (it starts at its first use).")


class SessionListOut(Schema):
    sessions: list[SessionOut]


class ProcessOut(Schema):
    name: str
    state: str = Field(description="running, backoff (restarting soon), exited, stopped")
    generation: int = Field(description="How many times it was started; each run is one.")
    restarts: int
    pid: int | None
    last_exit_code: int | None
    backoff_ms: int
    cmd: list[str] | str


class ProcessListOut(Schema):
    processes: list[ProcessOut]


TEXT = present("text", {"type": "string"})
DATA = present("data_b64", {"type": "string"})


class StdinIn(Fencing):
    # Text or bytes, one of them; nothing at all only to close stdin (the service says so).
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                present("eof", {"const": True}),
                {**TEXT, "not": DATA},
                {**DATA, "not": TEXT},
            ]
        }
    )

    text: str | None = Field(None, description="Text to write (UTF-8).")
    data_b64: str | None = Field(None, pattern=B64, description="Or bytes, base64-encoded.")
    eof: bool = Field(False, description="Close stdin after writing.")


class StdinOut(Schema):
    ok: bool
    generation: int


class ProcessOutputOut(Schema):
    name: str
    generation: int
    running: bool
    exit_code: int | None
    chunks: list[Chunk]


class ProcessOutputQuery(Schema):
    since_seq: int = Field(
        0, ge=0, le=COUNT_MAX, description="The last sequence number already seen (0: none)."
    )
    generation: int | None = Field(
        None, ge=1, le=COUNT_MAX, description="Which run; default the current one."
    )
    max_bytes: int | None = Field(None, ge=1, le=16 * 1024 * 1024)
    wait_seconds: float = Field(
        0, ge=0, le=60, description="Wait this long for new output if there is none yet."
    )
