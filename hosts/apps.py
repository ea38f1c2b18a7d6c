from django.apps import AppConfig


class HostsConfig(AppConfig):
    name = "hosts"
    verbose_name = "Docker hosts"

    def ready(self) -> None:
        # The runtime finds a host's engine through this app's service, which reads the rows.
        from hosts.engines import get_runtime
        from sandboxes.runtime import serve_engines

        serve_engines(get_runtime)
