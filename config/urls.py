from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


admin.site.site_header = "Boxyard"
admin.site.site_title = "Boxyard"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz),
]
