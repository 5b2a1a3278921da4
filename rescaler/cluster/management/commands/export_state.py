"""``manage.py export_state``: every key's state of one fragment, as JSON lines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workers.pipeline.model import PipelineError
from workers.readout import ReadoutError, export_state


class Command(BaseCommand):
    help = 'Write every key of a fragment as JSON lines {"key", "vnode", "pu", "value"}.'

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--pipeline", required=True)
        parser.add_argument("--fragment", required=True)
        parser.add_argument("--output", "-o", type=Path, help="default: standard output")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["output"]:
                with open(options["output"], "w", encoding="utf-8") as fh:
                    n = export_state(
                        settings.STATE_DIR, options["pipeline"], options["fragment"], fh
                    )
            else:
                n = export_state(
                    settings.STATE_DIR, options["pipeline"], options["fragment"], sys.stdout
                )
        except (ReadoutError, PipelineError) as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(f"exported {n} keys of {options['pipeline']}/{options['fragment']}")
