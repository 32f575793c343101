"""Produce's two ways to answer a partition (``_append`` in core/apis/produce.py): on the
spot, with no coroutine, where validation and the append finish at once (the common
case); through a coroutine where the append waits (its fsync under ``flush.messages``, a
record walk off the event loop). Both must answer alike."""

from __future__ import annotations

from brokkr.core.apis.produce import _append
from brokkr.core.context import ANONYMOUS, ConnectionInfo, RequestContext
from brokkr.core.errors import ErrorCode
from brokkr.core.testing import RawClient
from wire import PRODUCE, batch, produce_body

FIELDS = ("index", "error_code", "base_offset", "log_append_time_ms", "log_start_offset", "record_errors")


def _answers(client: RawClient, topic: str, batches: list[bytes]) -> list[tuple]:
    answers = []
    for records in batches:
        res = client.request(PRODUCE, 9, produce_body(topic, records)).responses[0].partition_responses[0]
        answers.append(tuple(getattr(res, f) for f in FIELDS))
    return answers


def test_an_append_answered_at_once_and_one_answered_after_its_fsync_answer_alike(brokkr_broker):
    broker = brokkr_broker.broker
    brokkr_broker.call(broker.create_topic, "at-once", 1, {})
    brokkr_broker.call(broker.create_topic, "fsynced", 1, {"flush.messages": "1"})
    corrupt = bytearray(batch(2))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches: refused by validation, on the spot in both
    batches = [batch(3), batch(2), bytes(corrupt), batch(1)]
    with RawClient(brokkr_broker.bootstrap_servers) as client:
        at_once = _answers(client, "at-once", batches)
        fsynced = _answers(client, "fsynced", batches)
    assert at_once == fsynced
    assert [a[1:3] for a in at_once] == [
        (ErrorCode.NONE, 0),
        (ErrorCode.NONE, 3),
        (ErrorCode.CORRUPT_MESSAGE, -1),
        (ErrorCode.NONE, 5),
    ]

    ctx = RequestContext(ConnectionInfo("t-1", "PLAINTEXT", "PLAINTEXT", "127.0.0.1", 0), ANONYMOUS, 0, 9, "t", 1)

    async def append_to_both() -> tuple:
        now = _append(broker, ctx, broker.partition("at-once", 0), memoryview(bytearray(batch(2))), 1)
        later = _append(broker, ctx, broker.partition("fsynced", 0), memoryview(bytearray(batch(2))), 1)
        waited = type(later) is not tuple
        later = await later if waited else later
        return now, waited, later

    now, waited, later = brokkr_broker.call(append_to_both)
    assert type(now) is tuple, "validated and appended at once: answered without a coroutine"
    assert waited, "answered only after the fsync"
    assert [tuple(getattr(r, f) for f in FIELDS) for r, _ in (now, later)] == [
        (0, ErrorCode.NONE, 6, -1, 0, []),
        (0, ErrorCode.NONE, 6, -1, 0, []),
    ]
    assert now[1] == later[1] == 8, "the next offset, which an acks=-1 produce waits for"


def test_a_topics_altered_settings_apply_to_its_next_produce(brokkr_broker):
    """Validation reads a topic's max.message.bytes and compression.type once per change of
    its settings (``TopicConfig.derived``): an alter applies to the very next batch."""
    broker = brokkr_broker.broker
    brokkr_broker.call(broker.create_topic, "altered", 1, {})
    records = batch(5)
    with RawClient(brokkr_broker.bootstrap_servers) as client:
        assert _answers(client, "altered", [records])[0][1:3] == (ErrorCode.NONE, 0)
        brokkr_broker.call(broker.alter_topic_config, "altered", {"max.message.bytes": str(len(records) - 1)})
        assert _answers(client, "altered", [records])[0][1] == ErrorCode.MESSAGE_TOO_LARGE
        brokkr_broker.call(broker.alter_topic_config, "altered", {"compression.type": "gzip"})
        assert _answers(client, "altered", [records])[0][1:3] == (ErrorCode.NONE, 5)
    stored = brokkr_broker.call(lambda: bytes(broker.partition("altered", 0).log.read(5, 1 << 20, 10, True)))
    assert stored[21 + 1] & 0x07 == 1, "the second batch is stored gzip-compressed, as the topic now says"
