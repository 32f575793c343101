"""read_committed consumers of the three Python clients on a log of aborted, committed and
still-open transactions (written by raw transactional produce and write_txn_markers): each
sees the committed records exactly once, never an aborted or open one, and never a marker."""

from __future__ import annotations

import pytest
from txn_wire import COMMITTED, UNVERIFIED, B, build_log, end_txn

from .conftest import aio_consume, ck_consume, kp_consume

#: Asking for one more than there is: a consumer that showed an aborted record would
#: return it within the wait.
WANTED = len(COMMITTED) + 1
WAIT = 4.0

CLIENTS = {
    "confluent-kafka": lambda b, t: ck_consume(b, t, WANTED, timeout=WAIT, **{"isolation.level": "read_committed"}),
    "kafka-python": lambda b, t: kp_consume(b, t, WANTED, timeout=WAIT, isolation_level="read_committed"),
    "aiokafka": lambda b, t: aio_consume(b, t, WANTED, timeout=WAIT, isolation_level="read_committed"),
}


@pytest.mark.parametrize("client", CLIENTS)
def test_read_committed_consumers_see_only_committed_records(brokkr_broker_factory, client):
    broker = brokkr_broker_factory(UNVERIFIED)
    broker.call(broker.broker.create_topic, "rc")
    build_log(broker)
    got = CLIENTS[client](broker.bootstrap_servers, "rc")
    assert [r.value for r in got] == COMMITTED
    assert [r.offset for r in got] == [0, 4, 5, 6, 11]
    end_txn(broker, B, True, [("rc", 0)])  # the open transaction commits: its record shows
    got = CLIENTS[client](broker.bootstrap_servers, "rc")
    assert [r.value for r in got] == [*COMMITTED, b"b2"]
