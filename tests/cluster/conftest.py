"""The cluster tests use the ``brokkr_cluster`` and ``brokkr_zookeeper`` fixtures of
brokkr's pytest plugin (``brokkr.core.testing``), which start a real ZooKeeper."""
