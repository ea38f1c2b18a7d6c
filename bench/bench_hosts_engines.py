"""Opens across two real Docker engines against one: `bench_hosts.py`'s second part.

A served Boxyard (`manage.py serve`, as `bin/run` serves: the Celery worker and scheduler in
the web process, whose keeper checks both hosts every 2 s) on a throw-away SQLite database,
with two Docker hosts: `local`, the machine's engine, and `second`, a throw-away dockerd of
the tests' own (`tests.engines.SecondEngine`: its own socket, data root and exec root, in a
network namespace of its own), registered with `hosts.services.add_host` and checked once
(`hosts.keeper.check`) after the disk keeper's image and the sandboxes' image were copied into
it (`docker save | docker load`).

Each round opens `--bots` new scope keys of one pipeline (no warm pool: every open makes a
container and its workspace's disk) with `POST /api/v1/sandboxes/open`, from `--threads`
threads at once, in one of three phases set with `hosts.services.drain` and `undrain`: only
`local` active, only `second`, both. Per round: opens a second (keys / the round's wall time)
and each open's latency; which host each sandbox went to is read from its row. Every sandbox is
closed with its workspace (`DELETE ...?delete_workspace=true`) after its round, outside the
timed part. Every round runs each phase once, in a new random order; the first rounds are
discarded.

Both engines run on the same machine and share its CPUs and disk: what two engines against
one measures here is Boxyard's own cost of placing across hosts, not added capacity.
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_api import PIPELINE, prepare, served  # bench/ is on sys.path
from bench_core import Stats

PHASES = {
    "one": "one engine: local active, second drained",
    "second": "the other alone: second active, local drained",
    "both": "two engines: local and second active",
}
ACTIVE = {"one": ("local",), "second": ("second",), "both": ("local", "second")}


def measure_opens(args: argparse.Namespace, deployment: str, data_dir: Path) -> dict[str, Any]:
    env, token, _raw, env_info = prepare(
        args.image, deployment, data_dir, "Boxyard Docker hosts benchmark: opens across engines"
    )
    # Django is set up (prepare): this process reads and writes the server's database.
    from django.conf import settings

    from boxyard.actors import Actor
    from hosts import keeper, services
    from hosts.models import DockerHost
    from pipelines.models import Pipeline

    # Imported by name: the tests' helpers are not part of what mypy checks.
    engines = importlib.import_module("tests.engines")

    Pipeline.objects.filter(slug=PIPELINE).update(max_live_sandboxes=4 * args.bots)
    actor = Actor("command", "bench")
    engine = engines.SecondEngine()
    try:
        began = time.perf_counter()
        engine.start()
        for image in dict.fromkeys((settings.BOXYARD_DISK_IMAGE, args.image)):
            engine.copy_image(image)
        second = services.add_host(actor, "second", url=engine.url)
        for host in (DockerHost.objects.get(is_default=True), second):
            if not keeper.check(host):
                raise RuntimeError(f"the host {host.name} did not answer its health check")
        facts = {h.name: h.engine_version for h in DockerHost.objects.all()}
        print(
            f"  second engine ({engine.storage_driver}, Docker {facts['second']}) started, "
            f"images copied in {time.perf_counter() - began:.1f} s",
            file=sys.stderr,
        )
        env_info["second_engine"] = {
            "version": facts["second"],
            "storage_driver": engine.storage_driver,
        }
        checks = {h.name: _health_checks(h, keeper) for h in DockerHost.objects.all()}
        with served(env, data_dir, embedded_worker=True) as server:
            result = _rounds(args, server, token, actor)
        result.update(env=env_info, checks=checks, rows=_rows())
        return result
    finally:
        engine.teardown()
        print("  second engine torn down", file=sys.stderr)


def _rounds(args: argparse.Namespace, server: Any, token: str, actor: Any) -> dict[str, Any]:
    import httpx

    from hosts import services
    from hosts.models import DockerHost
    from sandboxes.models import Sandbox

    latencies = {phase: Stats(phase) for phase in PHASES}
    rates: dict[str, list[float]] = {phase: [] for phase in PHASES}
    placed: dict[str, Counter[str]] = {phase: Counter() for phase in PHASES}
    errors: dict[str, list[str]] = {phase: [] for phase in PHASES}
    rng = random.Random(args.seed)
    order = list(PHASES)
    total = args.warmup_rounds + args.rounds
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=args.threads + 4)
    with (
        httpx.Client(
            base_url=server.base_url, headers=headers, timeout=300, limits=limits
        ) as client,
        ThreadPoolExecutor(args.threads) as pool,
    ):
        for round_no in range(total):
            rng.shuffle(order)
            for phase in order:
                for host in DockerHost.objects.all():
                    if host.name in ACTIVE[phase]:
                        services.undrain(host, actor)
                    else:
                        services.drain(host, actor)
                keys = [f"{phase}-{round_no}-{number}" for number in range(args.bots)]
                began = time.perf_counter()
                opened = list(pool.map(lambda key: _open(client, key), keys))
                wall = time.perf_counter() - began
                ids = [sandbox_id for _, sandbox_id, _ in opened if sandbox_id]
                hosts = Counter(
                    Sandbox.objects.filter(pk__in=ids).values_list("host__name", flat=True)
                )
                failed = [error for _, _, error in opened if error]
                list(pool.map(lambda sandbox_id: _close(client, sandbox_id), ids))
                if not ids:
                    raise RuntimeError(f"no open succeeded: {failed[:3]}\n{server.tail()}")
                if round_no >= args.warmup_rounds:
                    for seconds, sandbox_id, _ in opened:
                        if sandbox_id:
                            latencies[phase].add(seconds)
                    rates[phase].append(len(ids) / wall)
                    placed[phase].update(hosts)
                    errors[phase].extend(failed)
            print(f"\r  opens: round {round_no + 1}/{total}", end="", file=sys.stderr, flush=True)
    print(
        f"\r  opens: {total} rounds of {len(PHASES)} phases, the first "
        f"{args.warmup_rounds} discarded",
        file=sys.stderr,
    )
    return {"latencies": latencies, "rates": rates, "placed": placed, "errors": errors}


def _health_checks(host: Any, keeper: Any, count: int = 20) -> Stats:
    """`keeper.check(host)` timed `count` times: what every worker does every 2 s per host."""
    stats = Stats(f"health check of {host.name}")
    for _ in range(count):
        began = time.perf_counter()
        keeper.check(host)
        stats.add(time.perf_counter() - began)
    return stats


def _rows() -> dict[str, int]:
    """What the run left in the database: sandboxes (all closed), their events and leases."""
    from sandboxes.models import Event, Exec, Lease, Sandbox

    return {
        "sandboxes": Sandbox.objects.count(),
        "events": Event.objects.filter(sandbox__isnull=False).count(),
        "leases": Lease.objects.count(),
        "execs": Exec.objects.count(),
    }


def _open(client: Any, key: str) -> tuple[float, str, str]:
    """(seconds, sandbox id or "", error or "")."""
    began = time.perf_counter()
    response = client.post(
        "/api/v1/sandboxes/open",
        json={"pipeline": PIPELINE, "variables": {"launcher_type": "bench", "launcher_id": key}},
    )
    seconds = time.perf_counter() - began
    body = response.json()
    if response.status_code != 200 or body.get("status") != "running":
        return seconds, str(body.get("sandbox_id") or ""), f"{response.status_code} {body}"
    return seconds, str(body["sandbox_id"]), ""


def _close(client: Any, sandbox_id: str) -> None:
    response = client.delete(f"/api/v1/sandboxes/{sandbox_id}", params={"delete_workspace": "true"})
    if response.status_code != 200:
        raise RuntimeError(f"closing {sandbox_id}: {response.status_code} {response.text}")


# --- reporting ----------------------------------------------------------------------------------


def report_opens(result: dict[str, Any], args: argparse.Namespace) -> None:
    latencies: dict[str, Stats] = result["latencies"]
    rates: dict[str, list[float]] = result["rates"]
    second = result["env"]["second_engine"]
    print(
        f"opens of new scope keys across Docker hosts: {args.bots} per round from "
        f"{args.threads} threads, {args.rounds} rounds per phase, {args.image}; the second "
        f"engine Docker {second['version']}, {second['storage_driver']}"
    )
    header = (
        f"  {'phase':<48} {'opens/s median (min-max)':>25} {'latency p50/p90/p99 ms':>24} "
        f"{'n':>4}  placed"
    )
    print(header)
    print("  " + "-" * (len(header) - 2))
    for phase, description in PHASES.items():
        per_round = rates[phase]
        spread = f"{min(per_round):.1f}-{max(per_round):.1f}" if per_round else "-"
        rate = f"{statistics.median(per_round):.2f} ({spread})" if per_round else "-"
        triple = "/".join(f"{value:.0f}" for value in latencies[phase].percentiles())
        where = ", ".join(f"{name} {n}" for name, n in sorted(result["placed"][phase].items()))
        print(f"  {description:<48} {rate:>25} {triple:>24} {latencies[phase].n:>4}  {where}")
        for error in result["errors"][phase][:3]:
            print(f"    failed: {error[:200]}")
    if rates["one"] and rates["both"]:
        ratio = statistics.median(rates["both"]) / statistics.median(rates["one"])
        p50s = [latencies[p].percentile(50) for p in ("both", "one")]
        p99s = [latencies[p].percentile(99) for p in ("both", "one")]
        print(
            f"  two engines / one: opens/s {ratio:.2f}x, latency p50 {p50s[0] / p50s[1]:.2f}x, "
            f"p99 {p99s[0] / p99s[1]:.2f}x"
        )
    print(
        "  (both engines share this machine's CPUs and disk: the ratio is Boxyard's cost of "
        "placing across hosts, not added capacity)"
    )
    for name, stats in result["checks"].items():
        triple = "/".join(f"{value:.1f}" for value in stats.percentiles())
        print(f"  a health check of {name} (hosts.keeper.check), n={stats.n}: {triple} ms")
    rows = result["rows"]
    print(
        f"  rows left: {rows['sandboxes']} sandboxes (destroyed), {rows['events']} of their "
        f"events ({rows['events'] / max(1, rows['sandboxes']):.1f} each), {rows['leases']} "
        f"leases, {rows['execs']} execs"
    )
    print()


def opens_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The opens' figures for --json."""
    return {
        "environment": result["env"],
        "health_checks": {name: s.summary() for name, s in result["checks"].items()},
        "rows": result["rows"],
        "phases": {
            phase: {
                "description": description,
                "opens_per_second_by_round": [round(r, 3) for r in result["rates"][phase]],
                "latency": result["latencies"][phase].summary(),
                "placed": dict(result["placed"][phase]),
                "errors": result["errors"][phase],
            }
            for phase, description in PHASES.items()
        },
    }
