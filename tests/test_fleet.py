"""The fleet page at scale: a page of 50 rows at a time, sorted by any column either way,
searched by scope key, lease holder, chat variables or the id's beginning, in a constant
number of queries; its websocket keeps each page's rows, and offers new sandboxes to a page
they would move under its reader."""

import asyncio
import re
from itertools import cycle
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from boxyard.actors import Actor
from hosts.models import DockerHost
from sandboxes import live
from sandboxes.fleet import PAGE_SIZE, SORTS, FleetFilter, fleet_page
from sandboxes.models import Lease, Sandbox, State
from sandboxes.selectors import Principal
from tests.websockets import receive_until, websocket

ADMIN = Principal(Actor.admin("alice"), None)  # sees every pipeline's sandboxes
STATES = [State.RUNNING, State.STOPPED, State.DESTROYED, State.ERROR, State.CREATING]


def make_sandboxes(pipelines: list[Any], count: int, start: int = 0) -> list[Sandbox]:
    made = []
    states, owners = cycle(STATES), cycle(pipelines)
    for number in range(start, start + count):
        sandbox = Sandbox.objects.create(
            pipeline=next(owners),
            scope_key=f"Group_{number:04d}",
            state=next(states),
            retention="temporary",
            image="x",
            volume_name=f"v{number}",
            variables={"launcher_id": str(number), "sender_name": "Zoë" if number % 7 else "李"},
        )
        holder = f"admin:alice-{number}" if number % 3 == 0 else ""
        Lease.objects.create(sandbox=sandbox, holder=holder)
        made.append(sandbox)
    return made


@pytest.mark.django_db
def test_a_filter_matches_a_loaded_sandbox_as_its_query_does(make_pipeline) -> None:
    made = make_sandboxes([make_pipeline(slug="support"), make_pipeline(slug="billing")], 12)
    second = DockerHost.objects.create(name="second", url="tcp://second.invalid:2376")
    Sandbox.objects.filter(pk__in=[sandbox.pk for sandbox in made[::3]]).update(host=second)
    prefix = made[4].pk.hex[:6]
    sandboxes = list(Sandbox.objects.select_related("pipeline", "lease", "host"))
    filters = [
        FleetFilter(pipeline=slug, state=state, host=host, text=text)
        for slug in ("", "support", "nobody")
        for state in ("live", "all", State.RUNNING, State.DESTROYED)
        for host in ("", "local", "second")
        for text in ("", "group_1", "GROUP", "zzz", "alice-3", "zoë", "李", prefix, "0011")
    ]
    for chosen in filters:
        queried = set(chosen.apply(Sandbox.objects.all()).values_list("pk", flat=True))
        assert {s.pk for s in sandboxes if chosen.matches(s)} == queried, chosen
    assert not FleetFilter().matches(None)
    assert {s.pk for s in sandboxes if FleetFilter(state="all", text=prefix).matches(s)} == {
        made[4].pk
    }


@pytest.mark.django_db
def test_pages_hold_50_rows_in_the_order_asked_for(make_pipeline) -> None:
    make_sandboxes([make_pipeline(slug="support"), make_pipeline(slug="billing")], 120)
    everything = list(Sandbox.objects.select_related("pipeline", "lease"))
    for column, field in SORTS.items():
        for descending in (False, True):
            chosen = FleetFilter(state="all", sort=column, descending=descending)
            rows = [
                row.pk
                for number in (1, 2, 3)
                for row in fleet_page(
                    ADMIN, FleetFilter(**{**chosen.__dict__, "page": number})
                ).rows
            ]
            assert len(rows) == len(set(rows)) == 120, column  # every row once, none twice

            def value(sandbox: Sandbox, field: str = field) -> Any:
                for name in field.split("__"):
                    sandbox = getattr(sandbox, name)
                return sandbox

            by_id = {s.pk: s for s in everything}
            shown = [value(by_id[pk]) for pk in rows]
            present = [v for v in shown if v is not None]
            assert present == sorted(present, reverse=descending), (column, descending)
            # Empty values come last either way.
            assert shown[len(present) :] == [None] * (len(shown) - len(present)), column
    page = fleet_page(ADMIN, FleetFilter(state="all", page=3))
    assert (page.number, page.pages, page.total, len(page.rows)) == (3, 3, 120, 20)
    assert (page.first_row, page.last_row) == (101, 120)
    assert page.next_query == "" and "page=2" in page.previous_query
    # Past the end: the last page.
    assert fleet_page(ADMIN, FleetFilter(state="all", page=99)).number == 3


@pytest.mark.django_db
def test_the_page_costs_the_same_queries_at_10_and_300_sandboxes(
    admin_client, make_pipeline
) -> None:
    pipelines = [make_pipeline(slug="support"), make_pipeline(slug="billing")]

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            page = admin_client.get("/", {"state": "all", "sort": "-activity", "q": "group"})
        assert page.status_code == 200
        return len(captured)

    make_sandboxes(pipelines, 10)
    few = queries()
    make_sandboxes(pipelines, 290, start=10)
    assert queries() == few


@pytest.mark.django_db
def test_the_view_lives_in_its_links(admin_client, make_pipeline) -> None:
    make_sandboxes([make_pipeline(slug="support")], 60)
    page = admin_client.get("/", {"state": "all", "sort": "key", "page": "2"}).content.decode()
    assert 'aria-sort="ascending"><a href="?state=all&amp;sort=-key" data-sort="key">' in page
    assert 'data-sort="state"' in page and 'aria-sort="descending"' not in page
    assert "Page 2 of 2 (51–60 of 60)" in page
    assert 'href="?state=all&amp;sort=key" data-page="previous"' in page
    assert "Group_0059" in page and "Group_0049" not in page
    # The live table and the bulk destroy come back to this very view.
    assert 'ws-connect="/ws/fleet/?state=all&amp;sort=key&amp;page=2"' in page
    assert 'name="next" value="/?state=all&amp;sort=key&amp;page=2"' in page
    # Junk in the query is the default view, never an error.
    assert admin_client.get("/", {"sort": "nope", "page": "x", "state": "?"}).status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_new_sandbox_joins_the_first_page_and_is_offered_to_the_others(
    admin_client, make_pipeline
) -> None:
    pipeline = make_pipeline(slug="support")
    make_sandboxes([pipeline], PAGE_SIZE + 5)

    async def scenario() -> tuple[list[str], list[str]]:
        first = websocket("/ws/fleet/?state=all", admin_client)
        second = websocket("/ws/fleet/?state=all&page=2", admin_client)
        for page in (first, second):
            assert (await page.connect())[0]
            await page.receive_from(timeout=10)
        sandbox = await asyncio.to_thread(
            lambda: Sandbox.objects.create(
                pipeline=pipeline,
                scope_key="brand-new",
                state=State.CREATING,
                retention="temporary",
                image="x",
                volume_name="vnew",
            )
        )
        await asyncio.to_thread(lambda: Lease.objects.create(sandbox=sandbox))
        await asyncio.to_thread(live.changed, sandbox.pk)
        got = (
            await receive_until(first, lambda m: "brand-new" in m),
            await receive_until(second, lambda m: 'id="fleet-new"' in m),
        )
        for page in (first, second):
            await page.disconnect()
        return got

    first, second = asyncio.run(scenario())
    assert 'hx-swap-oob="afterbegin:#fleet-rows"' in first[-1]
    assert f"of {PAGE_SIZE + 6})" in first[-1]  # the pager counts it
    assert "brand-new" not in "".join(second)
    assert re.search(r"1 new sandbox matches this view\. <a href=\"\?state=all\">", second[-1])
