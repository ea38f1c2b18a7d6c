"""The sandbox page's actions with Django's test client: each applies or says why not, asks
before it acts (the question names the sandbox and what will happen), and says what it did.
And the admin's own command, answered in place. (Asking, in a real browser, is
tests/test_browser_live.py.)"""

import html
import re
from typing import Any

import pytest
from django.test import Client

from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.models import Sandbox, State
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sandbox(pipeline, bot, docker_engine) -> Sandbox:
    return services.open_sandbox(pipeline, CHAT, bot).sandbox


def buttons(admin_client: Client, sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    """Each action's button as the page shows it: its label, whether it is enabled, why not,
    and the question its form asks."""
    page = admin_client.get(f"/sandboxes/{sandbox.pk}/").content.decode()
    page = page[page.index('<section id="sandbox-status"') :]
    page = page[: page.index("</section>")]
    found = {}
    for form in re.findall(
        r'<form method="post" action="/sandboxes/[^"]+/(\w+)"(.*?)</form>', page, re.S
    ):
        name, rest = form
        button = re.search(
            r'<button type="submit" data-testid="(\w+)"([^>]*)>([^<]*)</button>', rest
        )
        if button is None or button.group(1) != name:
            continue
        why = re.search(rf'<span id="why-{name}"[^>]*>([^<]*)</span>', rest)
        confirm = re.search(r'data-confirm="([^"]*)"', rest)
        found[name] = {
            "label": html.unescape(button.group(3)),
            "enabled": "disabled" not in button.group(2),
            "why": html.unescape(why.group(1)) if why else "",
            "asks": html.unescape(confirm.group(1)) if confirm else "",
        }
    return found


def said(answer: Any) -> str:
    found = re.search(r'<ul class="messages"[^>]*>(.*?)</ul>', answer.content.decode(), re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip() if found else ""


def test_the_buttons_apply_to_the_sandbox_as_it_is_or_say_why_not(admin_client, sandbox) -> None:
    shown = buttons(admin_client, sandbox)
    assert set(shown) == {
        "takeover", "release", "renew", "restart", "reset", "move", "stop", "destroy",
    }  # fmt: skip
    # With this machine's engine the only host, there is nowhere to move it.
    assert (shown["move"]["enabled"], shown["move"]["why"]) == (
        False,
        "No other Docker host takes sandboxes now.",
    )
    assert shown["renew"] == {
        "label": "Renew",
        "enabled": False,
        "why": "Only the holder renews a lease: take it over first.",
        "asks": "",
    }
    assert shown["takeover"]["enabled"] and "group_123456" in shown["takeover"]["asks"]
    assert "423" in shown["takeover"]["asks"]
    # Releasing the bot's lease asks first, naming the bot's holder; destroying names the loss.
    assert "Release the lease of group_123456 on group_123456?" in shown["release"]["asks"]
    assert "cannot be brought back" in shown["destroy"]["asks"]
    assert shown["restart"]["label"] == "Restart" and shown["restart"]["asks"]

    admin_client.post(f"/sandboxes/{sandbox.pk}/takeover")
    mine = buttons(admin_client, sandbox)
    assert (mine["takeover"]["enabled"], mine["takeover"]["why"]) == (
        False,
        "You hold its lease already.",
    )
    assert mine["renew"]["enabled"] and mine["release"]["asks"] == ""  # one's own: no question

    admin_client.post(f"/sandboxes/{sandbox.pk}/stop")
    stopped = buttons(admin_client, sandbox)
    assert stopped["restart"]["label"] == "Start" and stopped["restart"]["enabled"]
    for name in ("reset", "stop"):
        assert (stopped[name]["enabled"], stopped[name]["why"]) == (
            False,
            "The sandbox is Stopped.",
        )
    assert stopped["release"]["why"] == "Nobody holds its lease."


def test_every_action_says_what_it_did(admin_client, sandbox) -> None:
    base = f"/sandboxes/{sandbox.pk}"
    outcomes = {
        "takeover": "You hold the lease of group_123456: the bot's changes are refused",
        "renew": "Your lease of group_123456 is renewed.",
        "release": "The lease of group_123456 is free",
        "restart": "group_123456 started again; its workspace is as it was.",
        "stop": "group_123456 is stopped; its workspace is kept.",
        "destroy": "group_123456 is destroyed, with its workspace.",
    }
    for action, outcome in outcomes.items():
        answer = admin_client.post(f"{base}/{action}", follow=True)
        assert outcome in said(answer), (action, said(answer))
    assert Sandbox.objects.get(pk=sandbox.pk).state == State.DESTROYED
    # What cannot be done says why, and changes nothing.
    answer = admin_client.post(f"{base}/reset", follow=True)
    assert "destroyed" in said(answer)


def test_destroy_selected_with_nothing_selected_destroys_nothing(admin_client, sandbox) -> None:
    answer = admin_client.post("/fleet/destroy", {"next": "/?state=live"})
    assert answer.status_code == 302 and answer["Location"] == "/?state=live"
    assert "nothing was destroyed" in said(admin_client.get("/"))
    assert Sandbox.objects.get(pk=sandbox.pk).state == State.RUNNING
    # `next` leads back to a page of this site only.
    away = admin_client.post("/fleet/destroy", {"next": "https://evil.example/"})
    assert away["Location"] == "/"


def test_run_as_me_answers_in_place(admin_client, sandbox, pipeline) -> None:
    htmx = {"HTTP_HX_REQUEST": "true"}
    run = f"/sandboxes/{sandbox.pk}/run"
    # Without the lease: the bot holds it; the refusal is shown where the output would be.
    refused = admin_client.post(run, {"cmd": "echo hi"}, **htmx)
    assert refused.status_code == 200 and 'role="alert"' in refused.content.decode()
    assert "leased to group_123456" in refused.content.decode()
    admin_client.post(f"/sandboxes/{sandbox.pk}/takeover")
    answer = admin_client.post(run, {"cmd": "echo out; echo err >&2; exit 3"}, **htmx)
    text = answer.content.decode()
    assert answer.status_code == 200 and text.startswith('<div id="run-result"')
    assert "exit code 3" in text
    assert re.search(r'data-testid="run-stdout">out\n</pre>', text)
    assert re.search(r'data-testid="run-stderr">err\n</pre>', text)
    # Without the page's script: the page again, with the exit code.
    plain = admin_client.post(run, {"cmd": "true"}, follow=True)
    assert "Exit code 0." in said(plain)
    token = PipelineToken.issue(pipeline, name="bot")[1]
    bot_api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert (
        bot_api.post(
            f"/api/v1/sandboxes/{sandbox.pk}/exec", {"cmd": "true"}, content_type="application/json"
        ).status_code
        == 423
    )


def test_revoking_a_token_and_deleting_a_pipeline_ask_first(
    admin_client, sandbox, pipeline
) -> None:
    token = PipelineToken.issue(pipeline, name="bot")[0]
    page = html.unescape(admin_client.get(f"/pipelines/{pipeline.slug}/").content.decode())
    assert (
        f'data-confirm="Revoke the token {token.prefix}…? Every bot that uses it gets 401 '
        "from its next call on." in page
    )
    assert (
        'data-confirm="Delete the pipeline support, and close and destroy its 1 live sandbox '
        "with its workspace? Its tokens stop working at once." in page
    )


def test_the_lease_shows_the_token_that_took_it(admin_client, pipeline, bot, docker_engine) -> None:
    api = Client(HTTP_AUTHORIZATION=f"Bearer {PipelineToken.issue(pipeline)[1]}")
    opened = api.post(
        "/api/v1/sandboxes/open",
        {"pipeline": pipeline.slug, "variables": CHAT},
        content_type="application/json",
    ).json()
    page = html.unescape(admin_client.get(f"/sandboxes/{opened['sandbox_id']}/").content.decode())
    assert re.search(r'data-testid="acquired-by">taken by the token \d+ of support<', page)
    fleet = html.unescape(admin_client.get("/").content.decode())
    assert re.search(r"group_123456<br><span class=\"muted\">the token \d+ of support<", fleet)
