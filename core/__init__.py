"""brokkr's core: the Kafka protocol, the produce pipeline, the hookspecs and the server."""
