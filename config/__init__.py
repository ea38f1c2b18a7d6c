from boxyard import heap

# Before any thread starts (the web server's, the workers'): glibc's arenas are chosen as
# threads first allocate, and every Boxyard process imports this package first.
heap.limit_malloc()

from config.celery import app as celery_app  # noqa: E402

__all__ = ["celery_app"]
