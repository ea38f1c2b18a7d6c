from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, JsonResponse
from django.urls import include, path

from boxyard.web import StaffLoginForm
from config.api import api
from sandboxes.api.links import serve_link
from sandboxes.bay.urls import bay
from sandboxes.e2b.control import api as e2b_api
from sandboxes.views import prometheus_metrics


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


admin.site.site_header = "Boxyard"
admin.site.site_title = "Boxyard"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("bay/", bay.urls),
    path("e2b/", e2b_api.urls),
    path("healthz", healthz),
    path("links/<str:token>", serve_link, name="file-link"),
    path("metrics", prometheus_metrics),
    path("login/", auth_views.LoginView.as_view(authentication_form=StaffLoginForm), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("pipelines/", include("pipelines.urls")),
    path("hosts/", include("hosts.urls")),
    path("", include("sandboxes.urls")),
]
