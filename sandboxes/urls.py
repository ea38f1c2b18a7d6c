from django.urls import path

from sandboxes import views

urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("fleet/destroy", views.destroy_many, name="fleet-destroy"),
    path("sandboxes/<uuid:sandbox_id>/", views.sandbox_detail, name="sandbox"),
    path("sandboxes/<uuid:sandbox_id>/files", views.files, name="sandbox-files"),
    path("sandboxes/<uuid:sandbox_id>/files/download", views.download, name="sandbox-download"),
    path("sandboxes/<uuid:sandbox_id>/files/upload", views.upload, name="sandbox-upload"),
    path("sandboxes/<uuid:sandbox_id>/files/archive", views.archive, name="sandbox-archive"),
    path("sandboxes/<uuid:sandbox_id>/files/delete", views.delete, name="sandbox-delete"),
    path("sandboxes/<uuid:sandbox_id>/log", views.log, name="sandbox-log"),
    path("sandboxes/<uuid:sandbox_id>/run", views.run_command, name="sandbox-run"),
    path("sandboxes/<uuid:sandbox_id>/code", views.run_code, name="sandbox-run-code"),
    path("sandboxes/<uuid:sandbox_id>/<slug:action>", views.sandbox_action, name="sandbox-action"),
    path("sessions/", views.sessions, name="sessions"),
]
