"""A typed Python client for Boxyard's bot API (`/api/v1`), blocking and asyncio.

    from boxyard_client import BoxyardClient, LeaseBusy

    with BoxyardClient("http://localhost:8000", token) as boxyard:
        box = boxyard.open("support", {"launcher_type": "group", "launcher_id": "42"})
        boxyard.write_file(box.sandbox_id, "hello.sh", "echo hello $1")
        print(boxyard.exec(box.sandbox_id, "sh hello.sh world").stdout)

It needs only httpx; it does not import the server's code.
"""

from boxyard_client._async import AsyncBoxyardClient
from boxyard_client._calls import Call
from boxyard_client._code import CodeContext, CodeResult
from boxyard_client._models import (
    DeleteResult,
    Downloaded,
    ExecEvent,
    ExecOutput,
    ExecResult,
    Extracted,
    FileContents,
    FileEntry,
    FileInfo,
    FileLink,
    FileList,
    KeptAlive,
    Lease,
    OpenedSandbox,
    OutputChunk,
    Process,
    ProcessOutput,
    ResetDone,
    RunResult,
    Sandbox,
    Session,
    StatusResult,
    StdinResult,
    Tools,
    Uploaded,
    WaitResult,
    Workspace,
    WriteResult,
)
from boxyard_client._sync import BoxyardClient
from boxyard_client.errors import (
    BadRequest,
    BoxyardAPIError,
    Conflict,
    InvalidState,
    LeaseBusy,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    ServiceUnavailable,
    StaleEpoch,
    TakenOver,
    Unauthorized,
    WorkspaceFull,
)

__all__ = [
    "AsyncBoxyardClient",
    "BadRequest",
    "BoxyardAPIError",
    "BoxyardClient",
    "Call",
    "CodeContext",
    "CodeResult",
    "Conflict",
    "DeleteResult",
    "Downloaded",
    "ExecEvent",
    "ExecOutput",
    "ExecResult",
    "Extracted",
    "FileContents",
    "FileEntry",
    "FileInfo",
    "FileLink",
    "FileList",
    "InvalidState",
    "KeptAlive",
    "Lease",
    "LeaseBusy",
    "NotFound",
    "OpenedSandbox",
    "OutputChunk",
    "PayloadTooLarge",
    "Process",
    "ProcessOutput",
    "QuotaExceeded",
    "ResetDone",
    "RunResult",
    "Sandbox",
    "ServiceUnavailable",
    "Session",
    "StaleEpoch",
    "StatusResult",
    "StdinResult",
    "TakenOver",
    "Tools",
    "Unauthorized",
    "Uploaded",
    "WaitResult",
    "Workspace",
    "WorkspaceFull",
    "WriteResult",
]
