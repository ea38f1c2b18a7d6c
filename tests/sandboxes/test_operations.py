"""The operation record on its own: parsing an input into its shape (a misfit names the
field), running the service and presenting its result (a long call's once it comes), the ids
and fields a caller gives; and the bot API's door onto it (`api.common.answer`): the record's
status, and a long call answered later."""

from dataclasses import dataclass, replace
from typing import Any

import pytest
from django.test import RequestFactory
from ninja import Schema
from ninja.responses import Status

from boxyard.actors import Actor
from boxyard.errors import InvalidInput
from boxyard.later import Awaited, Later
from pipelines.selectors import Principal
from sandboxes.api.common import answer
from sandboxes.operations import Call, Context, Operation, execs, files, sandboxes
from sandboxes.schemas import Input

WHO = Principal(Actor("bot", "support-bot"), None)


class NoteIn(Input):
    text: str
    holder: str | None = None


class NoteOut(Schema):
    said: str
    by: str
    at: str


@dataclass
class Said:
    text: str
    by: str


def _say(context: Context, call: Call[NoteIn]) -> Said:
    return Said(f"{call.given.text} in {call.sandbox_id}", f"{context.principal.actor}")


def _say_later(context: Context, call: Call[NoteIn]) -> Awaited[Said]:
    return Awaited.now(_say(context, call))


def _shown(said: Said) -> dict[str, Any]:
    return {"said": said.text, "by": said.by, "at": "here"}


NOTE = Operation[NoteIn, Said](
    name="note",
    summary="Say a note",
    method="POST",
    path="/sandboxes/{sandbox_id}/notes",
    input=NoteIn,
    output=NoteOut,
    service=_say,
    present=_shown,
)


def test_an_input_is_parsed_into_its_shape_and_a_misfit_names_its_field() -> None:
    assert NOTE.parse({"text": "hi"}) == NoteIn(text="hi")
    with pytest.raises(InvalidInput) as refused:
        NOTE.parse({"text": 5})
    assert refused.value.field == "text"
    with pytest.raises(InvalidInput) as unknown:
        NOTE.parse({"text": "hi", "txet": "typo"})
    assert unknown.value.field == "txet"


def test_an_operation_without_an_input_parses_to_none() -> None:
    assert execs.GET_EXEC.parse({}) is None


def test_the_service_runs_for_the_caller_and_its_result_is_presented() -> None:
    answered = NOTE.run(Context(WHO), Call(NoteIn(text="hi"), "s1"))
    assert answered == {"said": "hi in s1", "by": str(WHO.actor), "at": "here"}
    assert NOTE.shown({**answered, "extra": 1}) == answered  # the output's fields only


def test_a_long_calls_result_is_presented_once_it_comes() -> None:
    later = replace(NOTE, service=_say_later)
    answered = later.run(Context(WHO), Call(NoteIn(text="hi"), "s1"))
    assert isinstance(answered, Awaited)
    assert answered.block()["said"] == "hi in s1"


def test_the_ids_are_the_paths_and_the_fields_leave_out_what_is_filled_in() -> None:
    assert execs.EXEC_KILL.ids == ("sandbox_id", "exec_id")
    assert sandboxes.OPEN.ids == ()
    assert NOTE.fields == ("text",)  # not the holder
    assert sandboxes.OPEN.fields == ()  # the pipeline, variables, holder and async are filled
    assert files.READ.in_query and files.DELETE.in_query and not files.WRITE.in_query


def _request() -> Any:
    request = RequestFactory().post("/api/v1/sandboxes/s1/notes")
    request.auth = WHO
    return request


def test_the_api_answers_a_records_result_with_the_records_status() -> None:
    assert answer(_request(), NOTE, Call(NoteIn(text="hi"), "s1"))["said"] == "hi in s1"
    created = replace(NOTE, status=201)
    answered = answer(_request(), created, Call(NoteIn(text="hi"), "s1"))
    assert isinstance(answered, Status) and answered.status_code == 201


def test_the_api_answers_a_long_call_later_in_the_outputs_shape() -> None:
    later = replace(NOTE, service=_say_later)
    answered = answer(_request(), later, Call(NoteIn(text="hi"), "s1"))
    assert isinstance(answered, Later)
    assert answered.awaited.block() == {"said": "hi in s1", "by": str(WHO.actor), "at": "here"}


def test_the_api_gives_the_record_the_origin_the_request_reached() -> None:
    origin = replace(NOTE, service=lambda context, call: Said(context.origin, ""))
    assert answer(_request(), origin, Call(NoteIn(text="hi"), "s1"))["said"] == (
        "http://testserver"
    )


def test_media_are_the_images_a_run_displayed_and_none_for_other_operations() -> None:
    from sandboxes.operations import code

    answer = {
        "results": [
            {"type": "stdout", "text": "iVBOR"},
            {"type": "result", "text": "<Figure>", "png": "iVBO\nRw0K\n"},
            {"type": "result", "text": "photo", "jpeg": "/9j/4A=="},
            {"type": "result", "text": "42"},
        ]
    }
    assert code.RUN_CODE.media_of(answer) == [("image/png", "iVBORw0K"), ("image/jpeg", "/9j/4A==")]
    assert execs.EXEC.media_of({"stdout": "x"}) == []
