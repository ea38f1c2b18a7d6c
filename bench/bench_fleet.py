#!/usr/bin/env python
"""The fleet page with 1,000 sandboxes, over HTTP to a real server, beside the engine's own
listing of a labelled set of containers, in the same run.

Boxyard: the fleet page (`GET /`) for a logged-in staff user (logged in through `/login/`, its
session cookie kept by one keep-alive httpx client), timed from the request's send to the last
byte of its body, in four views: the first page in the default order (newest first, live
sandboxes), page 10, every sandbox sorted by last activity, newest first
(`?state=all&sort=-activity`), and a search (`?q=group_05`, which looks in scope keys, lease
holders, chat variables and id prefixes). The sandboxes are rows only, made with the ORM in
the benchmark's own database before the server starts (`--sandboxes`, 1000: two pipelines, the
states in turn, a lease held on every third, chat variables, creation and activity spread over
the last 30 days); there are no containers behind them, so the server is the web process alone
(`python -m config.serving`, no worker or scheduler: the reconciler would take every running
row for a lost sandbox).

Raw Docker, interleaved with those in the same rounds (each round runs every variant once, in a
new random order): `--containers` (20) real idle containers of `--image` (`sleep infinity`,
network none, the sandboxes' hardening) carrying the run's deployment label, listed by that
label with docker-py: `containers.list(all=True, filters={"label": ...})`, which asks the
engine for the list and then inspects every container it lists, and the single request `docker
ps -a --filter label=...` makes (`APIClient.containers`). This is what listing a fleet costs
at the engine, for reference: it does not list the same thing.

    .venv/bin/python bench/bench_fleet.py [--sandboxes 1000] [--rounds 30] [--json PATH]

It prints p50/p90/p99 and the page's size, and a PASS or FAIL line for the target (the first
page's p50 at most 300 ms); the exit status does not depend on it. Everything it made is
removed at the end (the deployment label `bench-<random>`) and the server stopped.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import manage, prepare, served, throwaway  # bench/ is on sys.path
from bench_core import DEPLOYMENT_LABEL, Stats, Variant, run_interleaved, timed

PASSWORD = "a-bench-password-1"
IMAGE = "boxyard/default:1"  # settings.BOXYARD_DEFAULT_IMAGE
TARGET_MS = 300.0

PAGES = {  # variant: (description, query)
    "first": ("GET / (first page, default order)", ""),
    "page 10": ("GET /?page=10", "?page=10"),
    "activity": ("GET /?state=all&sort=-activity", "?state=all&sort=-activity"),
    "search": ("GET /?q=group_05", "?q=group_05"),
}
RAW = {
    "raw list": 'docker-py containers.list(all=True, filters={"label": ...})',
    "raw ps": "docker-py APIClient.containers(all=True, filters=...) (docker ps -a)",
}


def make_fleet(count: int, image: str) -> int:
    """`count` sandboxes as rows: two pipelines, the states in turn, a lease held on every
    third, chat variables, and times spread over the last 30 days (as tests/test_fleet.py's
    `make_sandboxes` makes them, in bulk); returns how many are live (not destroyed)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from pipelines.models import Pipeline
    from sandboxes.models import Lease, Sandbox, State

    get_user_model().objects.create_user("bench-admin", password=PASSWORD, is_staff=True)
    pipelines = [
        Pipeline.objects.get(slug="bench"),
        Pipeline.objects.create(slug="bench-support", image=image, max_live_sandboxes=count),
    ]
    states = [State.RUNNING, State.STOPPED, State.DESTROYED, State.ERROR, State.CREATING]
    rng = random.Random(1000)
    now = timezone.now()
    rows = []
    for number in range(count):
        state = states[number % len(states)]
        created = now - timedelta(seconds=rng.uniform(0, 30 * 86400))
        active = created + (now - created) * rng.random() if number % 4 else None
        rows.append(
            Sandbox(
                pipeline=pipelines[number % 2],
                scope_key=f"Group_{number:04d}",
                state=state,
                retention="temporary",
                image=image,
                volume_name=f"bench-v{number}",
                variables={
                    "launcher_type": "chat",
                    "launcher_id": str(number),
                    "sender_name": "Zoë" if number % 7 else "李",
                },
                started_at=created if state != State.CREATING else None,
                last_activity_at=active,
                idle_deadline=active + timedelta(hours=1)
                if active and state == State.RUNNING
                else None,
                expires_at=created + timedelta(days=31) if state == State.RUNNING else None,
            )
        )
    made = Sandbox.objects.bulk_create(rows, batch_size=200)
    Lease.objects.bulk_create(
        [
            Lease(sandbox=sandbox, holder=f"admin:alice-{number}" if number % 3 == 0 else "")
            for number, sandbox in enumerate(made)
        ],
        batch_size=200,
    )
    # created_at is auto_now_add: spread it afterwards, so that the default order is a sort.
    for sandbox, row in zip(made, rows, strict=True):
        sandbox.created_at = row.started_at or now - timedelta(seconds=rng.uniform(0, 86400))
    Sandbox.objects.bulk_update(made, ["created_at"], batch_size=200)
    return Sandbox.objects.exclude(state=State.DESTROYED).count()


def log_in(client: Any) -> None:
    """Through the login form, as a browser would: its CSRF token, then the post."""
    form = client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    if form.status_code != 200 or token is None:
        raise RuntimeError(f"no login form: {form.status_code}")
    answer = client.post(
        "/login/",
        data={
            "username": "bench-admin",
            "password": PASSWORD,
            "csrfmiddlewaretoken": token.group(1),
            "next": "/",
        },
    )
    if answer.status_code != 302 or "sessionid" not in client.cookies:
        raise RuntimeError(f"the login failed: {answer.status_code}")


def page_variants(client: Any, sizes: dict[str, int]) -> dict[str, Variant]:
    def getter(name: str, query: str) -> Variant:
        def get() -> float:
            seconds, response = timed(lambda: client.get(f"/{query}"))
            if response.status_code != 200 or 'id="fleet-rows"' not in response.text:
                raise RuntimeError(f"GET /{query} answered {response.status_code}")
            sizes[name] = len(response.content)
            return seconds

        return get

    return {name: getter(name, query) for name, (_, query) in PAGES.items()}


def raw_variants(docker_client: Any, api: Any, label: str, expected: int) -> dict[str, Variant]:
    filters = {"label": label}

    def listed() -> float:
        seconds, found = timed(lambda: docker_client.containers.list(all=True, filters=filters))
        if len(found) != expected:
            raise RuntimeError(f"containers.list found {len(found)}, not {expected}")
        return seconds

    def ps() -> float:
        seconds, found = timed(lambda: api.containers(all=True, filters=filters))
        if len(found) != expected:
            raise RuntimeError(f"containers() found {len(found)}, not {expected}")
        return seconds

    return {"raw list": listed, "raw ps": ps}


def check_views(client: Any, pages: int) -> dict[str, str]:
    """What each view shows, said once before measuring (a view that shows nothing would be
    fast for the wrong reason)."""
    seen = {}
    for name, (_, query) in PAGES.items():
        text = client.get(f"/{query}").text
        rows = text.count('id="sandbox-')
        shown = re.search(r"Page \d+ of \d+ \([^)]*\)", text)
        seen[name] = f"{rows} rows, {shown.group(0) if shown else 'one page'}"
        if rows == 0:
            raise RuntimeError(f"GET /{query} shows no sandbox")
    if f"Page 10 of {pages}" not in client.get("/?page=10").text:
        raise RuntimeError("page 10 is not the 10th page")
    return seen


def measure(args: argparse.Namespace, deployment: str, data_dir: Path) -> dict[str, Any]:
    import docker
    import docker.utils
    import httpx

    env, _token, raw, env_info = prepare(
        args.image, deployment, data_dir, "Boxyard fleet page benchmark"
    )
    from sandboxes.fleet import PAGE_SIZE  # Django was set up by prepare()

    manage(env, "collectstatic", "--noinput", "--verbosity", "0")  # as `manage.py serve` does

    live = make_fleet(args.sandboxes, args.image)
    print(f"  {args.sandboxes} sandboxes in the database ({live} live)", file=sys.stderr)
    made = [raw.create_and_start(args.image) for _ in range(args.containers)]
    print(f"  {len(made)} idle containers of {args.image} running", file=sys.stderr)
    docker_client = docker.DockerClient(
        version="auto", timeout=120, **docker.utils.kwargs_from_env()
    )
    sizes: dict[str, int] = {}
    try:
        with (
            served(env, data_dir) as server,
            httpx.Client(base_url=server.base_url, timeout=120) as client,
        ):
            log_in(client)
            seen = check_views(client, -(-live // PAGE_SIZE))
            for name, shown in seen.items():
                print(f"  {PAGES[name][0]}: {shown}", file=sys.stderr)
            stats = run_interleaved(
                page_variants(client, sizes)
                | raw_variants(
                    docker_client, raw.api, f"{DEPLOYMENT_LABEL}={deployment}", args.containers
                ),
                args.rounds,
                args.warmup,
                random.Random(args.seed),
                "fleet page",
            )
    finally:
        for container, volume in made:
            raw.remove(container, volume)
        docker_client.close()
    return {"env": env_info, "stats": stats, "sizes": sizes, "seen": seen}


def _triple(values: tuple[float, ...], fmt: str = ".1f") -> str:
    return "/".join(format(value, fmt) for value in values)


def report(result: dict[str, Any], args: argparse.Namespace) -> None:
    stats: dict[str, Stats] = result["stats"]
    sizes, seen = result["sizes"], result["seen"]
    print(
        f"the fleet page with {args.sandboxes} sandboxes, beside listing {args.containers} "
        f"containers of {args.image} by label; n={stats['first'].n} per variant, "
        f"seed {args.seed}"
    )
    header = f"  {'variant':<66} {'p50/p90/p99 ms':>19} {'KB':>6}"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for name, (description, _) in PAGES.items():
        print(
            f"  {description:<66} {_triple(stats[name].percentiles()):>19} "
            f"{sizes[name] / 1024:>6.1f}"
        )
        print(f"    ({seen[name]})")
    for name, description in RAW.items():
        print(f"  {description:<66} {_triple(stats[name].percentiles()):>19}")
    print()
    for name, (description, _) in PAGES.items():
        print(
            f"  {description} / containers.list, p50/p90/p99: "
            f"{_triple(stats[name].ratios_to(stats['raw list']), '.2f')}; "
            f"/ docker ps: {_triple(stats[name].ratios_to(stats['raw ps']), '.2f')}"
        )
    print()
    p50 = stats["first"].percentile(50)
    verdict = "PASS" if p50 <= TARGET_MS else "FAIL"
    print(
        f"{verdict} fleet page, {args.sandboxes:,} sandboxes, p50 server time <= "
        f"{TARGET_MS:.0f} ms (first page: {p50:.1f} ms)"
    )
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxes", type=int, default=1000, help="sandbox rows (1000)")
    parser.add_argument("--containers", type=int, default=20, help="raw idle containers (20)")
    parser.add_argument("--rounds", type=int, default=30, help="measured rounds (30)")
    parser.add_argument("--warmup", type=int, default=3, help="discarded rounds (3)")
    parser.add_argument("--image", default=IMAGE, help=f"the containers' image ({IMAGE})")
    parser.add_argument("--seed", type=int, default=None, help="seed of the rounds' order")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    with throwaway("boxyard-bench-fleet-") as (deployment, data_dir):
        result = measure(args, deployment, data_dir)
    report(result, args)
    if args.json:
        stats = result["stats"]
        payload = {
            "environment": result["env"],
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "variants": {
                name: {"description": (PAGES.get(name) or (RAW[name],))[0], **s.summary()}
                for name, s in stats.items()
            },
            "page_bytes": result["sizes"],
            "views": result["seen"],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"raw figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
