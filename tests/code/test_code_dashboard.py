"""The code interpreter on the sandbox page: a run's results in the Commands tab as what they
are (a chart as an image, a table as a table, HTML cleaned of anything that acts), and the
admin's own code in the bot's kernel once they hold the lease."""

import re
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from pipelines.models import PipelineToken
from sandboxes import services
from sandboxes.models import Sandbox
from tests.conftest import CHAT

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
IMAGE = settings.BOXYARD_DEFAULT_IMAGE
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def sandbox(make_pipeline: Any, bot: Any, docker_engine: Any, settings: Any) -> Sandbox:
    settings.BOXYARD_IMAGE_ALLOWLIST = [settings.BOXYARD_TEST_IMAGE, IMAGE]
    pipeline = make_pipeline(slug="analysts", image=IMAGE)
    return services.open_sandbox(pipeline, CHAT, bot).sandbox


def run(sandbox: Sandbox, bot: Any, code: str) -> services.CodeRun:
    return services.execute_code(sandbox, services.clean_code_request(sandbox, code=code), bot)


def test_the_commands_tab_shows_a_runs_chart_table_and_cleaned_html(
    admin_client: Client, sandbox: Sandbox, bot: Any
) -> None:
    run(
        sandbox,
        bot,
        "import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 2), dpi=50)\n"
        "plt.plot([1, 2], [3, 4]);",
    )
    run(sandbox, bot, "import pandas as pd\npd.DataFrame({'sales': [3, 5]})")
    run(
        sandbox,
        bot,
        "from IPython.display import HTML, display\n"
        "display(HTML('<b>bold</b><script>alert(1)</script>"
        '<img src=x onerror="alert(2)"><a href="javascript:alert(3)">x</a>\'))',
    )
    page = admin_client.get(f"/sandboxes/{sandbox.pk}/").content.decode()
    commands = page[page.index('<section id="execs"') :]
    commands = commands[: commands.index("</section>")]
    assert re.search(
        r'<img alt="[^"]+" src="data:image/png;base64,iVBOR[^"]+" data-testid', commands
    )
    assert re.search(r'data-testid="code-html">\s*<div>\s*<table[^>]*>.*sales', commands, re.S)
    assert "<style" not in commands
    assert "<b>bold</b>" in commands
    # The code itself is shown as text (escaped); what it displayed keeps nothing that acts.
    assert "<script" not in commands and 'onerror="' not in commands
    assert 'href="javascript' not in commands and "<a " not in commands
    assert commands.count('class="tag">python</span>') == 3


def test_an_admin_runs_code_in_the_bots_kernel_after_taking_it_over(
    admin_client: Client, sandbox: Sandbox, bot: Any
) -> None:
    run(sandbox, bot, "shared = 21")
    url = f"/sandboxes/{sandbox.pk}/code"
    refused = admin_client.post(url, {"code": "shared"}, **HTMX)
    assert refused.status_code == 200 and 'role="alert"' in refused.content.decode()
    admin_client.post(f"/sandboxes/{sandbox.pk}/takeover")
    answer = admin_client.post(url, {"code": "shared * 2", "language": "python"}, **HTMX)
    text = answer.content.decode()
    assert text.startswith('<div id="code-run-result"') and '<pre class="out">42</pre>' in text
    bad = admin_client.post(url, {"code": "1", "language": "cobol"}, **HTMX)
    assert 'role="alert"' in bad.content.decode() and "cobol" in bad.content.decode()
    token = PipelineToken.issue(sandbox.pipeline, name="bot")[1]
    bot_api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    refused_bot = bot_api.post(
        f"/api/v1/sandboxes/{sandbox.pk}/code", {"code": "1"}, content_type="application/json"
    )
    assert refused_bot.status_code == 423
