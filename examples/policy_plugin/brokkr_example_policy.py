"""An example brokkr plugin, loaded through the ``brokkr`` entry point (see pyproject.toml).

It shows three kinds of hook in a few lines each:

* a setting of its own (``example.readonly.prefixes``), set like any Kafka setting:
  ``brokkr serve --override example.readonly.prefixes=audit.,_``;
* an authorizer: producing to a topic whose name starts with one of those prefixes
  answers TOPIC_AUTHORIZATION_FAILED; everything else is allowed;
* an observer: it counts the records appended to each topic.
"""

from __future__ import annotations

from collections import Counter

from brokkr.core.authorization import AclOperation, AuthorizationResult, ResourceType
from brokkr.core.config import ConfigDef, ConfigType
from brokkr.core.plugins import hookimpl

appended: Counter[str] = Counter()
_readonly: tuple[str, ...] = ()


@hookimpl
def brokkr_config_definitions():
    return [ConfigDef("example.readonly.prefixes", ConfigType.LIST, ["audit."], "Topic prefixes nobody may write.")]


@hookimpl
def brokkr_broker_started(broker):
    global _readonly
    _readonly = tuple(broker.config["example.readonly.prefixes"])


@hookimpl
def brokkr_authorize(actions):
    def decide(action):
        read_only = action.resource_type == ResourceType.TOPIC and action.resource_name.startswith(_readonly)
        denied = read_only and action.operation == AclOperation.WRITE
        return AuthorizationResult.DENIED if denied else AuthorizationResult.ALLOWED

    return [decide(a) for a in actions]


@hookimpl
def brokkr_after_log_append(partition, info):
    appended[partition.topic.name] += info.record_count
