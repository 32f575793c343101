"""Both built-in storage backends pass the shipped storage contract."""

from brokkr.core.storage_contract import StorageContract


class TestSegmentStorage(StorageContract):
    storage_name = "segment"


class TestMemoryStorage(StorageContract):
    storage_name = "memory"
    durable = False
