"""What the API reads and writes, and the OpenAPI schema of both, by resource:

- ``enums``: the choice lists the schema's enums are named after;
- ``operation_request``: the body of ``POST operations`` (the data plane's parser validates it);
- ``plans``: a plan, as a dry run answers it and as an operation keeps it;
- ``operations``: an operation (listed, and its document with steps, vnodes and events), and the
  audit log's events;
- ``cluster``: ``GET cluster`` and ``GET workers``;
- ``workers``: the bodies and answers of the workers' actions (add, cordon, notice, drain);
- ``keys``: ``GET fragments/<fragment>/keys/<key>``.

Callers import from the submodule.
"""
