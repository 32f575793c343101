"""BrokerClient, the broker's own client to other brokers: callers that share one
(the transaction coordinator's markers to a leader, from several transactions at once)
take turns on its connection."""

from __future__ import annotations

import asyncio

from brokkr.core.broker_client import BrokerClient
from wire import METADATA, metadata_body


def test_concurrent_requests_on_one_client_each_get_their_own_answer(brokkr_broker):
    """20 different requests at once (Metadata for topic t0, t1, ...): each caller gets the
    answer to its own, which names its topic."""
    host, port = brokkr_broker.bootstrap_servers.split(":")
    names = [f"t{i}" for i in range(20)]

    async def main():
        client = BrokerClient(host, int(port), "test")
        try:
            asked = (client.request(METADATA, 12, metadata_body(name, auto_create=False), 10) for name in names)
            return await asyncio.gather(*asked)
        finally:
            client.close()

    answers = asyncio.run(main())
    assert [[t.name for t in a.topics] for a in answers] == [[name] for name in names]
