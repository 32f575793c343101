"""Cluster membership implementations: ``zookeeper`` (Kafka's ZooKeeper layout, with kazoo)."""
