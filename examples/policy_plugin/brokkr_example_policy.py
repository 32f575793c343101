"""An example brokkr plugin, loaded through the ``brokkr`` entry point (see pyproject.toml).

It shows three kinds of hook in a few lines each:

* a setting of its own (``example.readonly.prefixes``), set like any Kafka setting:
  ``brokkr serve --override example.readonly.prefixes=audit.,_``;
* an authorizer: producing to a topic whose name starts with one of those prefixes
  answers TOPIC_AUTHORIZATION_FAILED; on everything else it has no opinion (None), so
  the other authorizers decide (allow-all by default, or the ACLs);
* an observer: it counts the records appended to each topic, in an object it registers
  for each broker (``counter(broker).appended``), so two brokers share nothing.
"""

from __future__ import annotations

from collections import Counter

from brokkr.core.authorization import AclOperation, AuthorizationResult, ResourceType
from brokkr.core.config import ConfigDef, ConfigType
from brokkr.core.plugins import hookimpl

COUNTER = "example-policy-counter"


@hookimpl
def brokkr_config_definitions():
    return [ConfigDef("example.readonly.prefixes", ConfigType.LIST, ["audit."], "Topic prefixes nobody may write.")]


@hookimpl
def brokkr_authorize(actions, broker):
    readonly = tuple(broker.config["example.readonly.prefixes"])

    def decide(action):
        read_only = action.resource_type == ResourceType.TOPIC and action.resource_name.startswith(readonly)
        return AuthorizationResult.DENIED if read_only and action.operation == AclOperation.WRITE else None

    return [decide(a) for a in actions]


class AppendCounter:
    def __init__(self):
        self.appended: Counter[str] = Counter()

    @hookimpl
    def brokkr_after_log_append(self, partition, info):
        self.appended[partition.topic.name] += info.record_count


@hookimpl
def brokkr_broker_started(broker):
    broker.pm.register(AppendCounter(), name=COUNTER)


def counter(broker) -> AppendCounter:
    """This broker's counter."""
    return broker.pm.get_plugin(COUNTER)
