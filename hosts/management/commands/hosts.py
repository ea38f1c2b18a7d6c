"""`manage.py hosts`: the Docker hosts Boxyard places sandboxes on, from the command line.

    manage.py hosts list
    manage.py hosts add NAME --url tcp://10.0.0.5:2376 --tls-ca ca.pem --tls-cert cert.pem \\
        --tls-key key.pem [--label zone=eu] [--cpus 16] [--memory-mb 65536] [--max-sandboxes 300]
    manage.py hosts add NAME --url ssh://boxyard@10.0.0.6
    manage.py hosts check NAME       (ask its engine now, as the health check does)
    manage.py hosts drain NAME | undrain NAME
    manage.py hosts move SANDBOX_ID [--to NAME]   (else where placement puts it)
    manage.py hosts move-all NAME    (every sandbox of a draining host, one at a time)
    manage.py hosts remove NAME      (a host that holds no sandbox; never local)
"""

from pathlib import Path
from typing import Any
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError, CommandParser

from boxyard.actors import Actor
from boxyard.errors import BoxyardError
from hosts import keeper, services
from hosts.models import DockerHost, default_host_pk
from sandboxes.models import QUOTA_STATES, Sandbox, State
from sandboxes.services.moving import move_all, move_sandbox
from sandboxes.services.placing import Load, loads_of

ACTOR = Actor("command", "hosts")


def _default() -> str:
    return str(DockerHost.objects.get(pk=default_host_pk()).name)


class Command(BaseCommand):
    help = "List, add, check, drain, undrain and remove the Docker hosts sandboxes are placed on."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="action", required=True)
        commands.add_parser("list", help="every host, its state and what it holds")
        add = commands.add_parser("add", help="a new host")
        add.add_argument("name")
        add.add_argument("--url", required=True, help="unix://, tcp:// or ssh:// address")
        for name in ("ca", "cert", "key"):
            add.add_argument(f"--tls-{name}", type=Path, help=f"TLS {name} (PEM file)")
        add.add_argument("--label", action="append", default=[], help="KEY=VALUE, repeatable")
        add.add_argument("--cpus", type=float, help="CPUs sandboxes may reserve")
        add.add_argument("--memory-mb", type=int, help="memory (MiB) sandboxes may reserve")
        add.add_argument("--max-sandboxes", type=int, help="live sandboxes at most")
        for name in ("check", "drain", "undrain", "move-all", "remove"):
            commands.add_parser(name).add_argument("name")
        move = commands.add_parser("move", help="one sandbox, to another host")
        move.add_argument("sandbox")
        move.add_argument("--to", help="the host (default: where placement puts it)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, f"_{options['action'].replace('-', '_')}")(options)
        except BoxyardError as error:
            raise CommandError(str(error)) from error

    def _list(self, options: dict[str, Any]) -> None:
        services.ensure_default_host()  # this machine's engine is a host, whatever befell its row
        hosts = list(DockerHost.objects.all())
        loads = loads_of([host.pk for host in hosts])
        for host in hosts:
            load = loads.get(host.pk, Load(0, 0.0, 0))
            cpus = f"{load.cpus:g}/{host.cpus:g}" if host.cpus is not None else f"{load.cpus:g}"
            memory = (
                f"{load.memory_mb}/{host.memory_mb}"
                if host.memory_mb is not None
                else str(load.memory_mb)
            )
            labels = ",".join(f"{k}={v}" for k, v in sorted(host.labels.items())) or "-"
            self.stdout.write(
                f"{host.name:<16} {host.condition:<9} {host.url or '(this machine)':<32} "
                f"sandboxes {load.sandboxes}/{host.max_sandboxes}  CPUs {cpus}  "
                f"MiB {memory}  labels {labels}"
            )

    def _add(self, options: dict[str, Any]) -> None:
        fields: dict[str, Any] = {"url": options["url"]}
        for name in ("ca", "cert", "key"):
            path = options[f"tls_{name}"]
            if path is not None:
                fields[f"tls_{name}"] = path.read_text()
        labels = {}
        for pair in options["label"]:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise CommandError(f"--label {pair!r}: give KEY=VALUE")
            labels[key] = value
        fields["labels"] = labels
        for name in ("cpus", "memory_mb", "max_sandboxes"):
            if options[name] is not None:
                fields[name] = options[name]
        host = services.add_host(ACTOR, options["name"], **fields)
        self.stdout.write(self.style.SUCCESS(f"added {host.name}"))
        self._check({"name": host.name})

    def _check(self, options: dict[str, Any]) -> None:
        host = services.find(options["name"])
        if keeper.check(host):
            host.refresh_from_db()
            self.stdout.write(
                f"{host.name} answers: Docker {host.engine_version}, {host.engine_cpus} CPUs, "
                f"{host.engine_memory_mb} MiB, {len(host.images)} images"
            )
            return
        host.refresh_from_db()
        if services.engine_owner(host) is not None:
            raise CommandError(f"{host.name} is refused: {host.last_error}")
        raise CommandError(f"{host.name} does not answer: {host.last_error}")

    def _drain(self, options: dict[str, Any]) -> None:
        services.drain(services.find(options["name"]), ACTOR)
        self.stdout.write(f"{options['name']} is draining: no new sandbox goes there")

    def _move(self, options: dict[str, Any]) -> None:
        try:
            sandbox_id = UUID(options["sandbox"])
        except ValueError:
            raise CommandError(f"not a sandbox id: {options['sandbox']!r}") from None
        sandbox = Sandbox.objects.select_related("pipeline", "host").filter(pk=sandbox_id).first()
        if sandbox is None:
            raise CommandError(f"no sandbox {options['sandbox']}")
        target = services.find(options["to"]) if options["to"] else None
        moved = move_sandbox(sandbox, target, ACTOR)
        self.stdout.write(
            f"moved {sandbox.pk} from {moved.source} to {moved.target} in {moved.seconds:.1f} s"
        )

    def _move_all(self, options: dict[str, Any]) -> None:
        host = services.find(options["name"])
        moved = move_all(host, ACTOR)
        for each in moved:
            self.stdout.write(f"moved {each.sandbox.pk} to {each.target} in {each.seconds:.1f} s")
        left = host.sandboxes.filter(state__in=[*QUOTA_STATES, State.STOPPED]).count()
        self.stdout.write(f"{len(moved)} moved; {left} left on {host.name}")

    def _remove(self, options: dict[str, Any]) -> None:
        kept = services.remove_host(services.find(options["name"]), ACTOR)
        self.stdout.write(
            f"removed {options['name']}"
            + (f" ({kept} destroyed sandboxes' rows kept, under {_default()})" if kept else "")
        )

    def _undrain(self, options: dict[str, Any]) -> None:
        services.undrain(services.find(options["name"]), ACTOR)
        self.stdout.write(f"{options['name']} is active")
