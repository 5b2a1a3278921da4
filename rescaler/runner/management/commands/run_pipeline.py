"""``manage.py run_pipeline``: the pipeline runner, reporting to and commanded through Postgres."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from rescaler.runner.control import OrmControl
from workers.cli import add_run_arguments, config_from_args, run_with_signals, start_errors
from workers.config import ConfigError


class Command(BaseCommand):
    help = "Run a pipeline: a long-running Spark driver (SPARK_MASTER, default local[2])."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_run_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        if options.get("state_dir") is None:
            options["state_dir"] = settings.STATE_DIR
        try:
            config = config_from_args(argparse.Namespace(**options)).with_(
                spark_master=settings.SPARK_MASTER
            )
        except ConfigError as exc:
            raise CommandError(str(exc)) from exc
        try:
            last = run_with_signals(config, OrmControl(state_dir=config.state_dir))
        except start_errors() as exc:  # the message says what to do
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"stopped after epoch {last}")
