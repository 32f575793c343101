"""Compression codecs, one plugin per codec (Kafka ids: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
