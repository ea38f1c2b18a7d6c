#!/usr/bin/env python
"""Docker hosts: placement decisions with many hosts and sandboxes (rows only), and opens
across two real engines against one, in the same run.

Placement. A throw-away database (SQLite; PostgreSQL too when DATABASE_URL names one, in a
database of its own made and dropped on that server) holds `--hosts` Docker hosts (20, then
100) and `--sandboxes` sandbox rows (1,000, then 10,000), no containers behind them. The hosts
vary: capacity in CPUs, memory and sandboxes set from what they hold (1.5 to 3 times it, some
unlimited), labels (zone a to d, a GPU label on every fifth), one draining, one down and one
without the pipelines' image; every one seen a moment ago with its images, as the health check
leaves them. The sandboxes belong to four pipelines (0.5 CPU / 512 MiB, 1 / 1024, 4 / 8192, and
one that requires zone b), seven in ten in a state that holds a place (running, creating), the
rest stopped or destroyed. Interleaved in the same rounds (see `bench_core.py`), a pipeline
drawn at random each time:

- `place(pipeline)` inside `transaction.atomic()`, the real path: the host rows locked (SELECT
  ... FOR UPDATE on PostgreSQL, the IMMEDIATE transaction on SQLite), every host's load
  aggregated in one query, the least loaded host that fits chosen, the transaction committed;
- `create_row(...)`: the pipeline locked, its quota counted, the placement, the sandbox's row,
  its lease and its event, rolled back; and the same committed (the row is then marked
  destroyed, outside the timed part, so the load stays as it was);
- `loads_of(...)`, the aggregate alone, outside any transaction;
- and, for the scaling page, what the fleet page reads at the same scale: the counters every
  change of a sandbox's state re-renders (`state_counts` and `fleet_cards`), and the first
  page's rows (`fleet_page`, the default view).

Then `--threads` threads place at once (the lock makes them take turns). Each (database, scale)
runs in a child process of its own (Django is set up once per process).

Opens across engines (`bench_hosts_engines.py`): a served Boxyard with the machine's engine as
host `local` and a second, throw-away engine (`tests/engines.py`) as host `second`; `--bots`
new scope keys opened per round from `--threads` threads over the bot API, with one host
active, the other, and both. Every sandbox is closed with its workspace between rounds.

    .venv/bin/python bench/bench_hosts.py [--decisions 300] [--rounds 5] [--bots 20] [--json PATH]

Nothing is asserted; everything made is removed at the end (the deployment label
`bench-<random>`, the second engine torn down, the PostgreSQL database dropped), even on failure.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import REPO, Stats, Variant, run_interleaved, timed  # bench/ is on sys.path

SCALES = ((20, 1000), (100, 10000))
IMAGE = "boxyard/busybox:1"  # the pipelines' image (rows only: never started)
PIPELINES: tuple[tuple[str, float, int, dict[str, str]], ...] = (  # slug, CPUs, MiB, labels
    ("bench-small", 0.5, 512, {}),
    ("bench-zoned", 1.0, 2048, {"zone": "b"}),
    ("bench-default", 1.0, 1024, {}),
    ("bench-big", 4.0, 8192, {}),
)
PLACING = {
    "place": "place(pipeline) in transaction.atomic()",
    "create": "create_row(...), rolled back",
    "create kept": "create_row(...), committed",
    "loads": "loads_of(hosts): the aggregate alone",
    # Not placement: what the fleet page reads, at the same scale (for docs/scaling.md).
    "counts": "fleet counters (state_counts + fleet_cards)",
    "page": "fleet_page(): the first page's 50 rows",
}
POSTGRES_URL_ENV = "BENCH_HOSTS_POSTGRES_URL"  # how the parent hands the server to a child


# --- placement, in a child process -------------------------------------------------------------


def setup_django(data_dir: Path, deployment: str, database_url: str) -> None:
    os.environ.update(
        {
            "BOXYARD_DATA_DIR": str(data_dir),
            "DATABASE_URL": database_url,
            "BOXYARD_DEPLOYMENT": deployment,
            "BOXYARD_IMAGE_ALLOWLIST": "boxyard/*",
            "BOXYARD_MAX_LIVE_SANDBOXES": "1000000",  # the operator's cap is not measured here
            "BOXYARD_RATE_LIMIT": "off",  # nor its rate limit
            "DJANGO_SETTINGS_MODULE": "config.settings",
        }
    )
    os.environ.setdefault("BOXYARD_LOG_LEVEL", "WARNING")
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def make_fleet(hosts: int, sandboxes: int) -> dict[str, int]:
    """The pipelines, `hosts` hosts (the default host `local` the first of them) and
    `sandboxes` rows spread over them; returns the counts by state."""
    from django.db import connection
    from django.utils import timezone

    from hosts.models import DockerHost, HostState
    from pipelines.models import Pipeline
    from sandboxes.models import QUOTA_STATES, Sandbox, State

    pipelines = [
        Pipeline.objects.create(
            slug=slug,
            image=IMAGE,
            cpus=cpus,
            memory_mb=memory,
            host_labels=labels,
            max_live_sandboxes=1_000_000,
        )
        for slug, cpus, memory, labels in PIPELINES
    ]
    states = [State.RUNNING] * 6 + [State.CREATING, State.STOPPED, State.STOPPED, State.DESTROYED]
    rows: list[Any] = []
    reserved = [[0, 0.0, 0] for _ in range(hosts)]  # sandboxes, CPUs, MiB holding a place
    for number in range(sandboxes):
        # Pipeline i % 4 on a host of zone i % 4: the zoned pipeline's rows are all in zone b.
        pipeline, host, state = pipelines[number % 4], number % hosts, states[number % 10]
        rows.append((pipeline, host, state))
        if state in QUOTA_STATES:
            reserved[host][0] += 1
            reserved[host][1] += pipeline.cpus
            reserved[host][2] += pipeline.memory_mb
    now = timezone.now()
    made = []
    for number in range(hosts):
        count, cpus, memory = reserved[number]
        room = (1.5, 2.0, 3.0, None)[(number // 4) % 4]  # within a zone, some room or none
        fields: dict[str, Any] = {
            "labels": {"zone": "abcd"[number % 4], **({"gpu": "yes"} if number % 5 == 0 else {})},
            "cpus": round(cpus * room, 1) if room else None,
            "memory_mb": int(memory * room) if room else None,
            "max_sandboxes": max(10, int(count * (2.0, 3.0, 4.0)[number % 3])),
            "state": HostState.DRAINING if number == hosts - 1 else HostState.ACTIVE,
            "down_since": now if number == hosts - 2 else None,
            "last_seen_at": now,
            "images": ["boxyard/default:1"] + ([] if number == hosts - 3 else [IMAGE]),
        }
        if number == 0:  # the machine's engine, made by the migrations
            DockerHost.objects.filter(is_default=True).update(**fields)
            made.append(DockerHost.objects.get(is_default=True))
        else:
            made.append(
                DockerHost.objects.create(
                    name=f"host-{number:03d}", url=f"tcp://host-{number:03d}.invalid:2376", **fields
                )
            )
    Sandbox.objects.bulk_create(
        [
            Sandbox(
                pipeline=pipeline,
                host=made[host],
                scope_key=f"chat_{number:05d}",
                state=state,
                retention="temporary",
                image=IMAGE,
                volume_name=f"bench-v{number}",
                variables={"launcher_type": "chat", "launcher_id": str(number)},
            )
            for number, (pipeline, host, state) in enumerate(rows)
        ],
        batch_size=500,
    )
    if connection.vendor == "postgresql":  # the statistics autovacuum would gather soon
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return dict(Counter(state for _, _, state in rows))


def placing_variants(rng: random.Random, chosen: Counter[str]) -> dict[str, Variant]:
    from django.db import transaction

    from boxyard.actors import Actor
    from hosts.models import DockerHost
    from pipelines.models import Pipeline
    from sandboxes import fleet
    from sandboxes.models import Sandbox, State
    from sandboxes.selectors import Principal
    from sandboxes.services.creating import create_row
    from sandboxes.services.placing import loads_of, place

    pipelines = list(Pipeline.objects.filter(slug__in=[slug for slug, *_ in PIPELINES]))
    host_ids = list(DockerHost.objects.values_list("pk", flat=True))
    actor = Actor("command", "bench")
    keys = itertools.count()

    def decide() -> float:
        pipeline = rng.choice(pipelines)
        start = time.perf_counter()
        with transaction.atomic():
            host = place(pipeline)
        seconds = time.perf_counter() - start
        chosen[host.name] += 1
        return seconds

    def create(keep: bool) -> float:
        pipeline = rng.choice(pipelines)
        variables = {"launcher_type": "bench", "launcher_id": str(next(keys))}
        start = time.perf_counter()
        with transaction.atomic():
            sandbox = create_row(pipeline, f"bench_{variables['launcher_id']}", variables, actor)
            if not keep:
                transaction.set_rollback(True)
        seconds = time.perf_counter() - start
        if keep:  # it holds no place from now on: every round sees the same load
            Sandbox.objects.filter(pk=sandbox.pk).update(state=State.DESTROYED)
        return seconds

    def read(operation: Any) -> Variant:
        return lambda: timed(operation)[0]

    default_view = fleet.FleetFilter.from_query({})
    admin = Principal(Actor.admin("bench"), None)  # sees every sandbox, as a page does
    return {
        "place": decide,
        "create": lambda: create(False),
        "create kept": lambda: create(True),
        "loads": read(lambda: loads_of(host_ids)),
        "counts": read(lambda: fleet.fleet_cards(fleet.state_counts())),
        "page": read(lambda: fleet.fleet_page(admin, default_view).rows),
    }


def queries_per_call() -> dict[str, int]:
    """How many queries one placement and one create_row make (counted once, not timed)."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from boxyard.actors import Actor
    from pipelines.models import Pipeline
    from sandboxes.services.creating import create_row
    from sandboxes.services.placing import place

    pipeline = Pipeline.objects.get(slug="bench-default")
    with CaptureQueriesContext(connection) as placed, transaction.atomic():
        place(pipeline)
    with CaptureQueriesContext(connection) as created, transaction.atomic():
        create_row(pipeline, "bench_counted", {}, Actor("command", "bench"))
        transaction.set_rollback(True)
    return {"place": len(placed.captured_queries), "create_row": len(created.captured_queries)}


def concurrent_placing(threads: int, each: int, seed: int) -> dict[str, Any]:
    """`threads` threads placing at once, `each` decisions apiece: decisions a second overall."""
    from django.db import connection, transaction

    from pipelines.models import Pipeline
    from sandboxes.services.placing import place

    pipelines = list(Pipeline.objects.filter(slug__in=[slug for slug, *_ in PIPELINES]))
    samples = Stats("place, concurrent")
    lock = threading.Lock()
    start_line = threading.Barrier(threads + 1)

    def work(number: int) -> None:
        rng = random.Random(seed + number)
        mine = []
        try:
            start_line.wait()
            for _ in range(each):
                pipeline = rng.choice(pipelines)
                began = time.perf_counter()
                with transaction.atomic():
                    place(pipeline)
                mine.append(time.perf_counter() - began)
        finally:
            connection.close()
        with lock:
            for seconds in mine:
                samples.add(seconds)

    workers = [threading.Thread(target=work, args=(number,)) for number in range(threads)]
    for worker in workers:
        worker.start()
    start_line.wait()
    began = time.perf_counter()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - began
    return {"threads": threads, "decisions": samples.n, "wall_s": wall, "stats": samples}


def database_version() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("select sqlite_version()")
            return f"SQLite {cursor.fetchone()[0]}"
        cursor.execute("show server_version")
        return f"PostgreSQL {cursor.fetchone()[0]}"


def placement_child(args: argparse.Namespace) -> int:
    """One (database, scale): its figures as JSON in `args.child_json`."""
    data_dir = Path(tempfile.mkdtemp(prefix="boxyard-bench-hosts-"))
    server_url = os.environ.pop(POSTGRES_URL_ENV, "")
    database = ""
    try:
        url = f"sqlite:///{data_dir / 'bench.sqlite3'}"
        if args.child == "postgres":
            database = f"boxyard_bench_{uuid.uuid4().hex[:8]}"
            _postgres(server_url, f'CREATE DATABASE "{database}"')
            url = urlunsplit(urlsplit(server_url)._replace(path=f"/{database}"))
        setup_django(data_dir, f"bench-{uuid.uuid4().hex[:8]}", url)
        made = time.perf_counter()
        states = make_fleet(args.hosts, args.sandboxes)
        made = time.perf_counter() - made
        print(
            f"  {database_version()}: {args.hosts} hosts, {args.sandboxes} sandboxes "
            f"made in {made:.1f} s",
            file=sys.stderr,
        )
        chosen: Counter[str] = Counter()
        stats = run_interleaved(
            placing_variants(random.Random(args.seed), chosen),
            args.decisions,
            args.warmup,
            random.Random(args.seed),
            f"placement, {args.hosts} hosts",
        )
        each = max(1, args.decisions // args.threads)
        concurrent = concurrent_placing(args.threads, each, args.seed)
        result = {
            "database": database_version(),
            "hosts": args.hosts,
            "sandboxes": args.sandboxes,
            "states": states,
            "queries": queries_per_call(),
            "hosts_chosen": dict(chosen),
            "variants": {
                name: {"description": PLACING[name], **s.summary()} for name, s in stats.items()
            },
            "concurrent": {**concurrent, "stats": concurrent["stats"].summary()},
        }
        args.child_json.write_text(json.dumps(result) + "\n")
        return 0
    finally:
        from django.apps import apps

        if apps.ready:  # the counters the process keeps, written while there is a database
            from sandboxes import metrics  # to take them (else at its exit)

            metrics.flush()
        if database:
            from django.db import connections

            connections.close_all()
            _postgres(server_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        shutil.rmtree(data_dir, ignore_errors=True)


def _postgres(server_url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(server_url, autocommit=True) as connection:
        connection.execute(statement.encode())


# --- the parent ---------------------------------------------------------------------------------


def run_placement(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (database, scale) in a child process; their figures."""
    server_url = os.environ.get("DATABASE_URL", "")
    databases = ["sqlite"] + (["postgres"] if server_url.startswith("postgres") else [])
    found = []
    for database, (hosts, sandboxes) in itertools.product(databases, SCALES):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
            if database == "postgres":
                env[POSTGRES_URL_ENV] = server_url
            command = [sys.executable, __file__, "--child", database, "--child-json", out.name]
            command += ["--hosts", str(hosts), "--sandboxes", str(sandboxes)]
            command += ["--decisions", str(args.decisions), "--warmup", str(args.warmup)]
            command += ["--threads", str(args.threads), "--seed", str(args.seed)]
            subprocess.run(command, cwd=REPO, env=env, check=True)
            found.append(json.loads(Path(out.name).read_text()))
    return found


def _stats(summary: dict[str, Any]) -> Stats:
    return Stats(summary.get("description", ""), list(summary["samples_ms"]))


def report_placement(results: list[dict[str, Any]]) -> None:
    for result in results:
        live = sum(n for state, n in result["states"].items() if state in ("running", "creating"))
        first = result["variants"]["place"]
        print(
            f"placement, {result['database']}: {result['hosts']} hosts, "
            f"{result['sandboxes']:,} sandboxes ({live:,} holding a place); n={first['n']} "
            f"per variant; queries: place {result['queries']['place']}, "
            f"create_row {result['queries']['create_row']}"
        )
        header = f"  {'variant':<44} {'p50/p90/p99 ms':>20} {'mean ms':>8} {'per s':>7}"
        print(header)
        print("  " + "-" * (len(header) - 2))
        for name, summary in result["variants"].items():
            stats = _stats(summary)
            triple = "/".join(f"{value:.2f}" for value in stats.percentiles())
            mean = summary["mean_ms"]
            print(f"  {PLACING[name]:<44} {triple:>20} {mean:>8.2f} {1000 / mean:>7.0f}")
        concurrent = result["concurrent"]
        stats = _stats(concurrent["stats"])
        print(
            f"  {concurrent['threads']} threads placing at once: "
            f"{concurrent['decisions'] / concurrent['wall_s']:.0f} decisions/s overall, each "
            f"p50/p99 {stats.percentile(50):.2f}/{stats.percentile(99):.2f} ms"
        )
        spread = result["hosts_chosen"]
        print(f"  place() chose {len(spread)} hosts of {result['hosts']}")
        print()


def print_versions(seed: int) -> None:
    from bench_api import _version
    from bench_core import _cpu_model

    print("Boxyard Docker hosts benchmark: placement, and opens across engines")
    print(f"  date      {datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"  cpu       {_cpu_model()} x {os.cpu_count()}")
    print(f"  kernel    {platform.system()} {platform.release()}")
    print(
        f"  python    {platform.python_version()}, Django {_version('django')}, "
        f"psycopg {_version('psycopg')}; seed {seed}"
    )
    print()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=300, help="placement rounds (300)")
    parser.add_argument("--warmup", type=int, default=20, help="discarded placement rounds (20)")
    parser.add_argument("--rounds", type=int, default=5, help="opens: rounds per phase (5)")
    parser.add_argument("--warmup-rounds", type=int, default=1, help="opens: discarded (1)")
    parser.add_argument("--bots", type=int, default=20, help="opens: new keys per round (20)")
    parser.add_argument("--threads", type=int, default=4, help="threads at once (4)")
    parser.add_argument("--image", default=IMAGE, help=f"the opened sandboxes' image ({IMAGE})")
    parser.add_argument("--skip-placement", action="store_true", help="only the opens")
    parser.add_argument("--skip-opens", action="store_true", help="only the placement")
    parser.add_argument("--seed", type=int, default=None, help="seed of the rounds' order")
    parser.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    # A child process: one (database, scale) of the placement.
    parser.add_argument("--child", choices=("sqlite", "postgres"), help=argparse.SUPPRESS)
    parser.add_argument("--child-json", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--hosts", type=int, default=SCALES[0][0], help=argparse.SUPPRESS)
    parser.add_argument("--sandboxes", type=int, default=SCALES[0][1], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(2**32)
    if args.child:
        return placement_child(args)
    from bench_api import throwaway
    from bench_hosts_engines import measure_opens, opens_summary, report_opens

    print_versions(args.seed)
    placement = [] if args.skip_placement else run_placement(args)
    report_placement(placement)
    opens: dict[str, Any] | None = None
    if not args.skip_opens:
        with throwaway("boxyard-bench-hosts-") as (deployment, data_dir):
            opens = measure_opens(args, deployment, data_dir)
        report_opens(opens, args)
    if args.json:
        payload = {
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "placement": placement,
            "opens": opens_summary(opens) if opens else None,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"raw figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
