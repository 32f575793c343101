"""Sans-IO Kafka protocol: primitives, message codecs built from Kafka's JSON, frames, record batches."""
