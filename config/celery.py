import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("boxyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

from config import workers  # noqa: E402, F401  # the apps joined to the worker's signals
