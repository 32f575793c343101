"""Core's own Kafka APIs, contributed through ``brokkr_apis`` like any plugin's, so that a
plugin registered later can replace any of them."""

from __future__ import annotations

import importlib

from ..plugins import hookimpl
from . import Api

_MODULES = (
    "produce",
    "fetch",
    "list_offsets",
    "offset_for_leader_epoch",
    "metadata",
    "api_versions",
    "create_topics",
    "delete_topics",
    "delete_records",
    "init_producer_id",
    "describe_configs",
    "sasl_handshake",
    "sasl_authenticate",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "describe_acls",
    "create_acls",
    "delete_acls",
    "describe_client_quotas",
    "alter_client_quotas",
    "incremental_alter_configs",
    "alter_configs",
    "create_partitions",
    "describe_log_dirs",
    "describe_cluster",
    "describe_topic_partitions",
    "elect_leaders",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "write_txn_markers",
    "describe_producers",
    "describe_quorum",
    "alter_replica_log_dirs",
    "list_config_resources",
)


@hookimpl(trylast=True)
def brokkr_apis() -> list[Api]:
    return [importlib.import_module(f"{__package__}.{name}").API for name in _MODULES]
