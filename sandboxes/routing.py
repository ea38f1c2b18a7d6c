from django.urls import path

from sandboxes import consumers

websocket_urlpatterns = [
    path("ws/fleet/", consumers.FleetConsumer.as_asgi()),
    path("ws/sandboxes/<uuid:sandbox_id>/", consumers.SandboxConsumer.as_asgi()),
    path("ws/sandboxes/<uuid:sandbox_id>/terminal/", consumers.TerminalConsumer.as_asgi()),
]
