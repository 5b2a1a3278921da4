from django.apps import AppConfig


class RunnerConfig(AppConfig):
    """The runner's side of the control plane: its control channel over Postgres
    (``control.OrmControl``, ``manage.py run_pipeline``) and its elastic workers (``workers``).
    Above the cluster and operations apps: it imports them, they never import it."""

    name = "rescaler.runner"
    label = "runner"
    verbose_name = "Runner"

    def ready(self) -> None:
        # the receivers import models, which the app registry allows only from here on
        from rescaler.runner import receivers  # noqa: F401  (connecting is importing)
