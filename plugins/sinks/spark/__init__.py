"""brokkr's log in Spark: the ``brokkr`` data source (:mod:`.datasource`), the
``brokkr_table`` one reading the mirror's Iceberg and Delta tables (:mod:`.table_source`),
and a helper that starts a SparkSession with both registered.

Importing this package does not import PySpark (a broker loading a sink from here does
not need it); :class:`BrokkrDataSource` and :func:`session` import it when used.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .datasource import BrokkrDataSource

__all__ = ["BrokkrDataSource", "session"]


def session(master: str = "local[*]", app_name: str = "brokkr", conf: Mapping[str, Any] | None = None) -> SparkSession:
    """A SparkSession (the active one if any, else a new one) with the ``brokkr`` data
    source registered, the Spark UI off, and this interpreter as the Python of the driver
    and the workers (so that they import the same brokkr). ``conf`` adds or overrides
    Spark settings; settings of an already running session are not changed."""
    import os

    from pyspark.sql import SparkSession

    from .datasource import BrokkrDataSource
    from .table_source import BrokkrTableDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings: dict[str, Any] = {
        "spark.ui.enabled": "false",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.session.timeZone": "UTC",
    }
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, str(value) if not isinstance(value, str) else value)
    spark = builder.getOrCreate()
    spark.dataSource.register(BrokkrDataSource)
    spark.dataSource.register(BrokkrTableDataSource)  # the mirror's Iceberg and Delta tables
    return spark


def __getattr__(name: str) -> Any:
    if name == "BrokkrDataSource":
        from .datasource import BrokkrDataSource

        return BrokkrDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
