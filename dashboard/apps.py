from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Dashboard"

    def ready(self) -> None:
        # the receivers import models and serializers, which the app registry allows only now
        from dashboard import live  # noqa: F401  (connecting is importing)
