from django.urls import path

from pipelines import views

urlpatterns = [
    path("", views.pipeline_list, name="pipelines"),
    path("new", views.pipeline_edit, name="pipeline-new"),
    path("scope-preview", views.scope_preview, name="scope-preview"),
    path("<slug:slug>/", views.pipeline_edit, name="pipeline"),
    path("<slug:slug>/delete", views.pipeline_delete, name="pipeline-delete"),
    path("<slug:slug>/tokens", views.token_create, name="token-create"),
    path("<slug:slug>/tokens/<int:token_id>/revoke", views.token_revoke, name="token-revoke"),
    path("<slug:slug>/skills", views.skill_add, name="skill-add"),
    path("<slug:slug>/skills/<int:skill_id>/remove", views.skill_remove, name="skill-remove"),
]
