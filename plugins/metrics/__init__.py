"""Metrics exporters: ``prometheus`` serves Kafka's broker metrics to Prometheus."""
