"""What every route of the bot API shares: the error shape, and the lease fields every call
that changes a sandbox accepts. Field names follow the tool schemas bots already know.

Types here are what the OpenAPI document promises; the services check the meaning (paths
inside /workspace, limits, known variables) and name the field they refuse.
"""

from ninja import Field, Schema


class ErrorBody(Schema):
    code: str
    message: str
    field: str | None = None


class ErrorOut(Schema):
    error: ErrorBody


class Fencing(Schema):
    """Optional on every call that changes a sandbox: who acts, and the epoch it holds."""

    holder: str | None = Field(None, max_length=200, description="Defaults to the scope key.")
    epoch: int | None = Field(None, ge=0, description="Refused if the lease has moved on.")
