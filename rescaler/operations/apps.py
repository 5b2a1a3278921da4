from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "rescaler.operations"
    label = "operations"
    verbose_name = "Rescale operations"
    default_auto_field = "django.db.models.BigAutoField"
