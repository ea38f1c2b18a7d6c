"""Pages and endpoints outside the bot API: the Prometheus metrics."""

import secrets

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from sandboxes import metrics


@require_GET
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """Every metric in Prometheus's text format, for a scraper holding `BOXYARD_METRICS_TOKEN`
    (`Authorization: Bearer ...`) or a logged-in admin; nobody else."""
    if not _may_scrape(request):
        response = HttpResponse("a metrics token or an admin session is required\n", status=401,
                                content_type="text/plain")
        response["WWW-Authenticate"] = "Bearer"
        return response
    return HttpResponse(metrics.prometheus_text(), content_type="text/plain; version=0.0.4; charset=utf-8")


def _may_scrape(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return True
    expected = settings.BOXYARD_METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return bool(expected) and scheme.lower() == "bearer" and secrets.compare_digest(
        given.strip().encode(), expected.encode()
    )
