"""One SparkSession (local[2]) for every Spark test: starting Spark costs seconds."""

from __future__ import annotations

import sys

import pytest
from brokkr.plugins.sinks.spark import session


@pytest.fixture(scope="session")
def spark():
    spark = session(
        master="local[2]",
        app_name="brokkr-tests",
        conf={
            "spark.pyspark.python": sys.executable,
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()
