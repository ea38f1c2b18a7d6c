from django.urls import path

from hosts import views

urlpatterns = [
    path("", views.host_list, name="hosts"),
    path("new", views.host_edit, name="host-new"),
    path("<slug:name>/", views.host_edit, name="host"),
    path("<slug:name>/<slug:action>", views.host_state, name="host-state"),
]
