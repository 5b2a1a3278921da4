"""Exactly-once sinks for the last fragment's outputs of each epoch (docs/sources-and-sinks.md).

The backends (psycopg, deltalake, nats-py) are imported only by the sink that needs them, so
importing this package in a Spark worker costs nothing for the sinks a pipeline does not use.

``base`` is the contract (``Sink``, ``EpochOutputs``, ``FunctionSink``, ``FanOut``), ``factory``
the sink a URI names (``sink_from_uri``), and each backend a module of its own.
"""

from workers.sinks.base import EpochOutputs, FanOut, FunctionSink, Sink, SinkError
from workers.sinks.factory import sink_from_uri

__all__ = ["EpochOutputs", "FanOut", "FunctionSink", "Sink", "SinkError", "sink_from_uri"]
