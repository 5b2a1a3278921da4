from django.apps import AppConfig


class AutoscalingConfig(AppConfig):
    """The autoscaler (issue 47): each pipeline's policy, and its decisions on the signals the
    runner reports. Above the cluster and operations apps: it plans through the operations'
    binding dry run; nothing below imports it."""

    name = "rescaler.autoscaling"
    label = "autoscaling"
    verbose_name = "Autoscaling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # the receivers import models, which the app registry allows only from here on
        from rescaler.autoscaling import receivers  # noqa: F401  (connecting is importing)
