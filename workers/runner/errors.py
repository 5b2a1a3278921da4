"""The runner's own failures."""


class RunnerError(Exception):
    """The runner cannot start or continue; the message says what to do."""


class StopRequested(Exception):
    """Raised at the start of a micro-batch after a stop: the batch changes nothing and Spark
    does not commit it, so the next start re-runs it from its logged offsets."""
