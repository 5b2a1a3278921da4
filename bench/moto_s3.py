"""moto's S3 server (``moto[server]``) as the tests and benchmarks run it: ``python -m
bench.moto_s3 -H 127.0.0.1 -p PORT``, moto's own command line, with one answer made as S3 makes
it.

moto names the root element of its CompleteMultipartUpload answer
``CompleteMultipartUploadResponse``; S3 names it ``CompleteMultipartUploadResult``. The AWS SDK
inside pyarrow 26 reads any other root as an error embedded in a 200 answer, so every object
pyarrow writes (a multipart upload, even of a few bytes) failed after its retries. The answer
is renamed here, and nothing else of moto changes.
"""

from __future__ import annotations

import sys
from typing import Any

MOTO_ROOT = "CompleteMultipartUploadResponse"
S3_ROOT = "CompleteMultipartUploadResult"


def as_s3_answers() -> None:
    """Patch moto's S3 serializer so that CompleteMultipartUpload answers with S3's root."""
    from moto.core import serialize

    original = serialize.S3Serializer._serialized_result_to_response

    def renamed(self: Any, resp: Any, result: Any, shape: Any, serialized: Any) -> Any:
        resp = original(self, resp, result, shape, serialized)
        body = resp.get("body")
        if isinstance(body, str) and f"<{MOTO_ROOT}" in body:
            resp["body"] = body.replace(f"<{MOTO_ROOT}", f"<{S3_ROOT}").replace(
                f"</{MOTO_ROOT}>", f"</{S3_ROOT}>"
            )
        return resp

    serialize.S3Serializer._serialized_result_to_response = renamed  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    as_s3_answers()
    from moto.server import main as moto_main

    moto_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
