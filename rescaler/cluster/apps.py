from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "rescaler.cluster"
    label = "cluster"
    verbose_name = "Cluster"
    default_auto_field = "django.db.models.BigAutoField"
