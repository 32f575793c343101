"""The registry on a 3-broker ZooKeeper cluster of ``brokkr serve`` processes: a schema
registered through one broker is served by the others (writes are forwarded to the
leader of ``_schemas``), and after that leader is SIGKILLed reads and new writes go on
with ids still unique."""

from __future__ import annotations

import json

import httpx
from brokkr.core.testing import CLUSTER_SETTINGS, free_port
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from tests.serve import Served
from tests.waiting import wait_for


def record(name: str) -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "fields": [{"name": "x", "type": "int"}]}))


class Node:
    def __init__(self, node_id: int, zookeeper: str, root):
        self.node_id, self.url = node_id, f"http://127.0.0.1:{free_port()}"
        settings = {
            **CLUSTER_SETTINGS,
            "node.id": node_id,
            "zookeeper.connect": zookeeper,
            "log.dirs": str(root / f"b{node_id}"),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "brokkr.schema.registry.listeners": self.url,
        }
        self.served = Served(*(f"--override={k}={v}" for k, v in settings.items()), cwd=root)
        self.client = SchemaRegistryClient({"url": self.url})


def schema_of(url: str, schema_id: int) -> str | None:
    answer = httpx.get(f"{url}/schemas/ids/{schema_id}")
    return answer.json()["schema"] if answer.status_code == 200 else None


def schemas_leader(bootstrap: str) -> int:
    def leader():
        topic = AdminClient({"bootstrap.servers": bootstrap}).list_topics("_schemas", timeout=5).topics["_schemas"]
        return topic.partitions[0].leader if topic.error is None and 0 in topic.partitions else None

    return wait_for("a leader of _schemas", lambda: (lead := leader()) is not None and lead >= 0 and lead)


def register_when_led(client: SchemaRegistryClient, subject: str, schema: Schema) -> int:
    """Register, retrying while the store has no leader yet (50003/50004)."""

    def attempt():
        try:
            return client.register_schema(subject, schema)
        except SchemaRegistryError as exc:
            assert exc.error_code in (50002, 50003, 50004), exc
            return None

    return wait_for(f"registering {subject}", attempt)


def test_reads_everywhere_writes_at_the_leader_and_ids_survive_its_death(brokkr_zookeeper, tmp_path):
    nodes = [Node(i, brokkr_zookeeper, tmp_path) for i in (1, 2, 3)]
    try:
        bootstrap = ",".join(n.served.address for n in nodes)
        wait_for(
            "three brokers",
            lambda: len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).brokers) == 3,
        )
        first = register_when_led(nodes[0].client, "orders-value", record("Order"))
        assert first == 1
        for node in nodes:  # every broker serves it, from its own replica
            wait_for(f"node {node.node_id} to serve id 1", lambda node=node: schema_of(node.url, 1))
            assert httpx.get(node.url + "/subjects").json() == ["orders-value"]
        leader = schemas_leader(bootstrap)
        followers = [n for n in nodes if n.node_id != leader]
        # A follower's registry forwards the write to the leader's.
        assert register_when_led(followers[0].client, "users-value", record("User")) == 2
        wait_for("the other follower to serve id 2", lambda: schema_of(followers[1].url, 2))
        victim = next(n for n in nodes if n.node_id == leader)
        victim.served.kill()  # SIGKILL: its ZooKeeper session expires, another replica leads
        survivors = ",".join(n.served.address for n in followers)
        wait_for("a new leader of _schemas", lambda: schemas_leader(survivors) != leader)
        third = register_when_led(followers[1].client, "payments-value", record("Payment"))
        assert third == 3  # the new leader replayed ids 1 and 2: none is reused
        for node in followers:
            wait_for(f"node {node.node_id} to serve id 3", lambda node=node: schema_of(node.url, 3))
            texts = [schema_of(node.url, i) for i in (1, 2, 3)]
            assert [json.loads(t)["name"] for t in texts] == ["Order", "User", "Payment"]
            assert httpx.get(node.url + "/subjects").json() == ["orders-value", "payments-value", "users-value"]
    finally:
        for node in nodes:
            node.served.kill()
