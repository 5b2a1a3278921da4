"""Command line of the data plane, shared by ``python -m workers`` and the Django commands."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.config import ConfigError, RunnerConfig
from workers.pipeline.builtins import BUILTINS
from workers.pipeline.model import PipelineError
from workers.rescale.protocol import Strategy


def start_errors() -> tuple[type[BaseException], ...]:
    """What stops a start with a message instead of a traceback: the source, the sink, the
    state directory or the snapshot to restore cannot be used (each message says what to do)."""
    from workers.natsio import NatsUnavailable
    from workers.recovery.format import SnapshotError
    from workers.runner import RunnerError
    from workers.sinks.base import SinkError
    from workers.source_stream import SourceMissing
    from workers.sources.jetstream import StreamMissing

    return (SourceMissing, NatsUnavailable, StreamMissing, SinkError, SnapshotError, RunnerError)


PIPELINE_HELP = (
    "a built-in pipeline (" + ", ".join(sorted(BUILTINS)) + ") or package.module:function, a "
    "function returning a workers.pipeline.Pipeline (default: $RESCALER_PIPELINE)"
)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get("RESCALER_PIPELINE") or None
    parser.add_argument("--pipeline", required=env is None, default=env, help=PIPELINE_HELP)
    parser.add_argument(
        "--source",
        default=os.environ.get("RESCALER_SOURCE", ""),
        help="generator, dir:PATH of JSON-lines files, or nats:STREAM (a JetStream stream at "
        "$RESCALER_NATS_URL); default: $RESCALER_SOURCE, else the pipeline's own source, else "
        "the generator",
    )
    parser.add_argument(
        "--sink",
        default=os.environ.get("RESCALER_SINK", ""),
        help="postgres://…?table=NAME, delta:PATH, nats://HOST:PORT/SUBJECT or files (Arrow "
        "files for debugging); default: $RESCALER_SINK, else the pipeline's own sink",
    )
    parser.add_argument(
        "--epochs", type=int, help="stop after N committed epochs (default: run on)"
    )
    parser.add_argument("--rows-per-epoch", type=int, help="generator records per epoch")
    parser.add_argument(
        "--source-rows", type=int, help="generator records in all, then an idle stream"
    )
    parser.add_argument("--key-space", type=int, help="distinct generator keys (words or users)")
    parser.add_argument("--words-per-line", type=int, help="wordcount generator: words per line")
    parser.add_argument("--zipf-s", type=float, help="Zipf exponent of the generator's keys")
    parser.add_argument("--seed", type=int, help="generator seed")
    parser.add_argument("--trigger-interval", type=float, help="seconds between epochs (0: asap)")
    parser.add_argument("--state-dir", type=Path, help="default: $STATE_DIR or ./var/state")
    parser.add_argument("--initial-pus", type=int, help="PUs each fragment starts on")
    parser.add_argument("--no-spark-ui", action="store_true", help="do not start Spark's web UI")
    parser.add_argument(
        "--preaggregate",
        action="store_true",
        help="fold the records of operators with aggregates per key in Spark before they "
        "reach Python (default: $RESCALER_PREAGGREGATE, else off; docs/data-plane.md)",
    )
    parser.add_argument(
        "--restore-from",
        metavar="SNAPSHOT",
        help="start an empty state directory from a snapshot: latest, or a snapshot id (see "
        "$RESCALER_RECOVERY_DIR); with --initial-pus, at any size",
    )
    parser.add_argument(
        "--snapshot-every",
        help="take a snapshot every N epochs (20) or every T (90s, 5m); default: "
        "$RESCALER_SNAPSHOT_EVERY, else off",
    )


def config_from_args(args: argparse.Namespace) -> RunnerConfig:
    """The runner's configuration; the pipeline is loaded (and checked) to learn its name."""
    from workers.pipeline.loading import load_pipeline, resolve_sink

    try:
        pipeline = load_pipeline(args.pipeline)
    except PipelineError as exc:
        raise ConfigError(str(exc)) from exc
    config = RunnerConfig.from_env(
        pipeline=pipeline.name,
        pipeline_ref=args.pipeline,
        source=args.source,
        sink=args.sink,
        epochs=args.epochs,
        rows_per_epoch=args.rows_per_epoch,
        source_rows=args.source_rows,
        key_space=args.key_space,
        zipf_s=args.zipf_s,
        words_per_line=args.words_per_line,
        seed=args.seed,
        trigger_interval_s=args.trigger_interval,
        state_dir=args.state_dir,
        initial_pus=args.initial_pus,
        spark_ui=False if args.no_spark_ui else None,
        preaggregate=True if args.preaggregate else None,
        restore_from=args.restore_from,
        snapshot_every=args.snapshot_every,
    )
    try:
        resolve_sink(config, pipeline)  # a pipeline with nowhere to write stops here
    except PipelineError as exc:
        raise ConfigError(str(exc)) from exc
    return config


def run_with_signals(config: RunnerConfig, control: Any) -> int:
    """Run the pipeline; SIGINT/SIGTERM stop it after the epoch in flight."""
    from workers.runner import PipelineRunner

    runner = PipelineRunner(config, control)
    # kill -USR1 <pid>: every thread's stack to standard error (the log), for a runner that
    # seems stuck; it goes on running
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def stop(signum: int, frame: object) -> None:
        logging.getLogger("workers").warning("signal %d: stopping after this epoch", signum)
        runner.request_stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    return runner.run()


def main(
    argv: list[str] | None = None, *, control_factory: Callable[[RunnerConfig], Any] | None = None
) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_arguments(sub.add_parser("run", help="run a pipeline (a long-running Spark driver)"))
    cluster = sub.add_parser(
        "standalone",
        help="run a local Spark standalone master and N workers until stopped (scripts/dev --workers)",
    )
    cluster.add_argument("--workers", type=int, default=2, help="workers to start (1 core each)")
    cluster.add_argument("--cores", type=int, default=1, help="cores of each worker")
    cluster.add_argument("--state-dir", type=Path, help="default: $STATE_DIR or ./var/state")
    cluster.add_argument("--url-file", type=Path, help="write the master's URL here once up")
    export = sub.add_parser("export-state", help="write every key's state as JSON lines")
    export.add_argument("--pipeline", required=True, help="the pipeline's name")
    export.add_argument("--fragment", required=True)
    export.add_argument("--state-dir", type=Path)
    export.add_argument("--output", "-o", type=Path, help="default: standard output")
    resc = sub.add_parser("rescale", help="scale out, scale in or migrate a running pipeline")
    resc.add_argument("--pipeline", required=True, help="the pipeline's name")
    resc.add_argument("--fragment", required=True, action="append", help="repeat for several")
    resc.add_argument("--add", default="", help="parallel units to add, e.g. 2,3")
    resc.add_argument("--remove", default="", help="parallel units to remove, e.g. 1")
    resc.add_argument("--strategy", default="live", choices=[s.value for s in Strategy])
    resc.add_argument(
        "--granularity",
        default="auto",
        help="auto (chosen from the plan's size), fluid, batched, all_at_once, or a JSON object",
    )
    resc.add_argument("--weighted", action="store_true", help="balance measured bytes too")
    resc.add_argument("--dry-run", action="store_true", help="print the plan, move nothing")
    resc.add_argument("--state-dir", type=Path)
    resc.add_argument("--operation-id", help="operation id (default: a new one)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.command == "run":
            from workers.control import LocalControl

            config = config_from_args(args)
            control = (
                control_factory(config)
                if control_factory
                else LocalControl(config.pipeline_dir / "control")
            )
            last = run_with_signals(config, control)
            print(f"stopped after epoch {last}", file=sys.stderr)
            return 0
        if args.command == "rescale":
            return rescale_main(args)
        if args.command == "standalone":
            return standalone_main(args)
        return export_main(args)
    except ConfigError as exc:
        parser.error(str(exc))
    except start_errors() as exc:  # the source or sink cannot be used: the message says why
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 2


def export_main(args: argparse.Namespace) -> int:
    from workers.config import default_state_dir
    from workers.readout import ReadoutError, export_state

    state_dir = args.state_dir or default_state_dir()
    try:
        if args.output:
            with open(args.output, "w", encoding="utf-8") as fh:
                n = export_state(state_dir, args.pipeline, args.fragment, fh)
        else:
            n = export_state(state_dir, args.pipeline, args.fragment, sys.stdout)
    except (ReadoutError, KeyError, PipelineError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"exported {n} keys of {args.pipeline}/{args.fragment}", file=sys.stderr)
    return 0


def _units(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def rescale_main(args: argparse.Namespace) -> int:
    import json

    from workers.config import default_state_dir
    from workers.rescale.errors import RescaleError
    from workers.rescale.local import plan_local, rescale
    from workers.rescale.protocol import OperationRequest, StepPhase, Tick, TickStatus

    granularity: Any = args.granularity
    if granularity.startswith("{"):
        granularity = json.loads(granularity)
    body = {
        "changes": {
            frag: {
                "added_parallel_units": _units(args.add),
                "removed_parallel_units": _units(args.remove),
            }
            for frag in args.fragment
        },
        "strategy": args.strategy,
        "granularity": granularity,
        "dry_run": args.dry_run,
        "weighted": args.weighted,
    }
    pipeline_dir = (args.state_dir or default_state_dir()) / args.pipeline
    try:
        request = OperationRequest.parse(body)
        if args.dry_run:
            print(json.dumps(plan_local(pipeline_dir, request).to_json(), indent=2))
            return 0

        def show(tick: Tick) -> None:
            steps = tick.progress.steps if tick.progress else ()
            keys_moved = tick.progress.keys_moved if tick.progress else 0
            done = sum(1 for s in steps if s.phase == StepPhase.DONE)
            print(
                f"\r{tick.status:<10} steps done {done}/{len(steps)}  keys moved {keys_moved:>10}",
                end="",
                file=sys.stderr,
                flush=True,
            )

        result = rescale(pipeline_dir, request, operation_id=args.operation_id, on_tick=show)
    except (RescaleError, FileNotFoundError) as exc:
        code = getattr(exc, "code", "error")
        print(f"refused ({code}): {exc}", file=sys.stderr)
        return 2
    print(file=sys.stderr)
    print(json.dumps({k: v for k, v in result.to_json().items() if k != "progress"}))
    return 0 if result.status == TickStatus.COMPLETED else 1


def standalone_main(args: argparse.Namespace) -> int:
    """A standalone master and ``--workers`` workers on this machine, in the foreground; SIGINT
    or SIGTERM stops them all (workers the local provider added later included)."""
    import os
    import threading

    from workers.config import default_state_dir
    from workers.provider import (
        LocalMaster,
        LocalProvider,
        ProviderError,
        local_store_dir,
        local_workers_dir,
    )

    if args.workers < 0 or args.cores < 1:
        print("error: --workers must be >= 0 and --cores >= 1", file=sys.stderr)
        return 2
    state_dir = args.state_dir or default_state_dir()
    master = LocalMaster(state_dir / "_spark_master")
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    provider: LocalProvider | None = None
    try:
        url = master.start()
        print(f"Spark master {url} (web UI :{master.webui_port})", file=sys.stderr, flush=True)
        # the same registry the control plane's local provider uses to add and release workers
        provider = LocalProvider(
            url,
            local_workers_dir(state_dir=state_dir),
            local_dir=local_store_dir(state_dir=state_dir),
        )
        for _ in range(args.workers):
            print(f"  {provider.add(args.cores)}", file=sys.stderr, flush=True)
        if args.url_file:
            tmp = args.url_file.with_suffix(".tmp")
            tmp.write_text(url + "\n", "utf-8")
            os.replace(tmp, args.url_file)
        stop.wait()
    except ProviderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if provider is not None:
            provider.stop_all()
        master.stop()
        if args.url_file:
            args.url_file.unlink(missing_ok=True)
    return 0
