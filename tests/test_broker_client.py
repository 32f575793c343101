"""BrokerClient, the broker's own client to other brokers: callers that share one
(the transaction coordinator's markers to a leader, from several transactions at once)
take turns on its connection."""

from __future__ import annotations

import asyncio

from brokkr.core.broker_client import BrokerClient
from brokkr.core.protocol.frames import request_spec

API_VERSIONS = 18


def test_concurrent_requests_on_one_client_each_get_their_own_answer(brokkr_broker):
    host, port = brokkr_broker.bootstrap_servers.split(":")
    body = request_spec(API_VERSIONS).cls(client_software_name="t", client_software_version="1")

    async def main():
        client = BrokerClient(host, int(port), "test")
        try:
            return await asyncio.gather(*(client.request(API_VERSIONS, 3, body, 10) for _ in range(20)))
        finally:
            client.close()

    answers = asyncio.run(main())
    assert len(answers) == 20 and all(a.error_code == 0 and a.api_keys for a in answers)
