"""The two built-in pipelines."""

from __future__ import annotations

from typing import Any

from workers.operators import Count, PageStats, UserActivity
from workers.pipeline.model import DEFAULT_VNODES, Fragment, Pipeline, UnknownPipeline

WORD_SEPARATOR = " "


def _prepare_wordcount(df: Any) -> Any:
    # lines -> words; splitting on single spaces keeps Spark and the oracle in exact agreement.
    # SQL strings, not Column objects: each Column is a py4j round trip, paid at every epoch
    words = df.selectExpr(
        "seq", "_malformed", f"posexplode_outer(split(line, '{WORD_SEPARATOR}')) AS (pos, word)"
    )
    # a malformed line has no words: posexplode_outer keeps it as one row for the report;
    # src marks one record per source line, so the runner can count source rows per epoch
    return words.where("_malformed IS NOT NULL OR word != ''").selectExpr(
        "seq", "_malformed", "word", "CAST(pos = 0 AS INT) AS src"
    )


def _prepare_clickstream(df: Any) -> Any:
    return df.selectExpr("seq", "user", "page", "ts", "bytes", "_malformed", "1 AS src")


def wordcount(vnodes: int = DEFAULT_VNODES) -> Pipeline:
    return Pipeline(
        name="wordcount",
        source_kind="lines",
        fragments=(Fragment("word_count", Count(), key="word", region=1, vnodes=vnodes),),
        prepare=_prepare_wordcount,
        description="lines → words → count per word",
    )


def clickstream(vnodes: int = DEFAULT_VNODES) -> Pipeline:
    return Pipeline(
        name="clickstream",
        source_kind="events",
        fragments=(
            Fragment("user_activity", UserActivity(), key="user", region=1, vnodes=vnodes),
            Fragment(
                "page_stats",
                PageStats(),
                key="page",
                region=2,
                vnodes=vnodes,
                upstream="user_activity",
            ),
        ),
        prepare=_prepare_clickstream,
        description=("events → by user: events, bytes, sessions → by page: views and unique users"),
    )


BUILTINS = {"wordcount": wordcount, "clickstream": clickstream}


def get_pipeline(name: str, vnodes: int = DEFAULT_VNODES) -> Pipeline:
    try:
        return BUILTINS[name](vnodes)
    except KeyError:
        raise UnknownPipeline(
            f"unknown pipeline {name!r}; built-in pipelines: {', '.join(sorted(BUILTINS))}"
        ) from None
