from django.apps import AppConfig


class BayConfig(AppConfig):
    name = "sandboxes.bay"
    label = "bay"
    verbose_name = "AstrBot's Bay API"
