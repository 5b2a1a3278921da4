"""The two built-in pipelines."""

from __future__ import annotations

from typing import Any

from workers.operators import Count, PageStats, UserActivity
from workers.pipeline.model import DEFAULT_VNODES, Fragment, Pipeline, UnknownPipeline

WORD_SEPARATOR = " "


def _prepare_wordcount(df: Any) -> Any:
    # lines -> words; splitting on single spaces keeps Spark and the oracle in exact agreement
    from pyspark.sql import functions as F

    words = df.select(
        "seq",
        "_malformed",
        F.posexplode_outer(F.split("line", WORD_SEPARATOR)).alias("pos", "word"),
    )
    # src marks one record per source line, so the runner can count source rows per epoch
    words = words.withColumn("src", (F.col("pos") == 0).cast("int"))
    # a malformed line has no words: posexplode_outer keeps it as one row for the report
    return words.where(F.col("_malformed").isNotNull() | (F.col("word") != "")).drop("pos")


def _prepare_clickstream(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.select("seq", "user", "page", "ts", "bytes", "_malformed", F.lit(1).alias("src"))


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
