from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path

from config.api import api
from sandboxes.views import prometheus_metrics


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


admin.site.site_header = "Boxyard"
admin.site.site_title = "Boxyard"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("healthz", healthz),
    path("metrics", prometheus_metrics),
]
