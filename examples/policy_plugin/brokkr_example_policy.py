"""An example brokkr plugin, loaded through the ``brokkr`` entry point (see pyproject.toml).

It shows four kinds of hook in a few lines each:

* settings of its own (``example.readonly.prefixes``, ``example.keyed.prefixes``), set
  like any Kafka setting: ``brokkr serve --override example.readonly.prefixes=audit.,_``;
* an authorizer: producing to a topic whose name starts with one of the read-only
  prefixes answers TOPIC_AUTHORIZATION_FAILED; on everything else it has no opinion
  (None), so the other authorizers decide (allow-all by default, or the ACLs);
* a record validator: a batch to a topic whose name starts with one of the keyed
  prefixes is refused whole if any record has no key, with INVALID_RECORD and one KIP-467
  record error per keyless record (``brokkr.core.validation.iter_records`` walks them);
* an observer: it counts the records appended to each topic, in an object it registers
  for each broker (``counter(broker).appended``), so two brokers share nothing.
"""

from __future__ import annotations

from collections import Counter

from brokkr.core.authorization import AclOperation, AuthorizationResult, ResourceType
from brokkr.core.config import ConfigDef, ConfigType
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.record_checks import rejection_message
from brokkr.core.validation import RecordsError, ValidatedRecords, iter_records

COUNTER = "example-policy-counter"


@hookimpl
def brokkr_config_definitions():
    return [
        ConfigDef("example.readonly.prefixes", ConfigType.LIST, ["audit."], "Topic prefixes nobody may write."),
        ConfigDef("example.keyed.prefixes", ConfigType.LIST, ["keyed."], "Topic prefixes whose records need a key."),
    ]


@hookimpl
def brokkr_authorize(actions, broker):
    readonly = tuple(broker.config["example.readonly.prefixes"])

    def decide(action):
        read_only = action.resource_type == ResourceType.TOPIC and action.resource_name.startswith(readonly)
        return AuthorizationResult.DENIED if read_only and action.operation == AclOperation.WRITE else None

    return [decide(a) for a in actions]


@hookimpl(wrapper=True)
def brokkr_validate_records(partition, broker):
    validated = yield  # the built-in validator's answer: the batch it accepted, or an awaitable of it
    if not partition.topic.name.startswith(tuple(broker.config["example.keyed.prefixes"])):
        return validated
    return require_keys(partition, validated, broker)


async def require_keys(partition, validated, broker):
    if not isinstance(validated, ValidatedRecords):  # a large batch, checked off the event loop first
        validated = await validated
    keyless = [i for i, record in enumerate(iter_records(validated, broker)) if record.key is None]
    if keyless:  # the whole batch is refused, nothing of it stored; the client gets each record's error
        errors = [(i, f"Record without a key in {partition.name}") for i in keyless]
        raise RecordsError(ErrorCode.INVALID_RECORD, rejection_message(errors), errors)
    return validated


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
