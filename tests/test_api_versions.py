"""ApiVersions advertises what Kafka 4.1's brokers advertise for every API brokkr serves,
so that clients take brokkr for the release it speaks: kafka-python infers a broker's
release from the versions, and a range with another release's marker beside a gap of
an older one made it infer 4.3 of a broker that serves 4.1's protocol."""

from __future__ import annotations

import pytest
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient

API_VERSIONS = 18

#: Kafka 4.1's ApiVersions on a broker listener: each request JSON's validVersions at
#: confluentinc/kafka v8.1.0 (Apache Kafka 4.1.0) of the APIs whose listeners include
#: "broker", less a latest version marked latestVersionUnstable (OffsetCommit v10,
#: OffsetFetch v10, InitProducerId v6), with Produce from v0 (ApiKeys'
#: PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION, KAFKA-18659).
KAFKA_4_1 = {
    0: (0, 13),  # Produce
    1: (4, 18),  # Fetch
    2: (1, 10),  # ListOffsets
    3: (0, 13),  # Metadata
    8: (2, 9),  # OffsetCommit
    9: (1, 9),  # OffsetFetch
    10: (0, 6),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 6),  # DescribeGroups
    16: (0, 5),  # ListGroups
    17: (0, 1),  # SaslHandshake
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 5),  # InitProducerId
    23: (2, 4),  # OffsetForLeaderEpoch
    24: (0, 5),  # AddPartitionsToTxn
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 5),  # EndTxn
    27: (1, 1),  # WriteTxnMarkers
    28: (0, 5),  # TxnOffsetCommit
    29: (1, 3),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    34: (1, 2),  # AlterReplicaLogDirs
    35: (1, 4),  # DescribeLogDirs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    38: (1, 3),  # CreateDelegationToken
    39: (1, 2),  # RenewDelegationToken
    40: (1, 2),  # ExpireDelegationToken
    41: (1, 3),  # DescribeDelegationToken
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 1),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    47: (0, 0),  # OffsetDelete
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    55: (0, 2),  # DescribeQuorum
    57: (0, 2),  # UpdateFeatures
    60: (0, 2),  # DescribeCluster
    61: (0, 0),  # DescribeProducers
    64: (0, 0),  # UnregisterBroker
    65: (0, 0),  # DescribeTransactions
    66: (0, 2),  # ListTransactions
    68: (0, 1),  # ConsumerGroupHeartbeat
    69: (0, 1),  # ConsumerGroupDescribe
    71: (0, 0),  # GetTelemetrySubscriptions
    72: (0, 0),  # PushTelemetry
    74: (0, 1),  # ListConfigResources
    75: (0, 0),  # DescribeTopicPartitions
    76: (1, 1),  # ShareGroupHeartbeat
    77: (1, 1),  # ShareGroupDescribe
    78: (1, 1),  # ShareFetch
    79: (1, 1),  # ShareAcknowledge
    80: (0, 0),  # AddRaftVoter
    81: (0, 0),  # RemoveRaftVoter
    83: (0, 0),  # InitializeShareGroupState
    84: (0, 0),  # ReadShareGroupState
    85: (0, 0),  # WriteShareGroupState
    86: (0, 0),  # DeleteShareGroupState
    87: (0, 0),  # ReadShareGroupStateSummary
    90: (0, 1),  # DescribeShareGroupOffsets (v1, KIP-1226's lag: Kafka 4.2)
    91: (0, 0),  # AlterShareGroupOffsets
    92: (0, 0),  # DeleteShareGroupOffsets
}
#: Where brokkr stops short of 4.1, and why: version 5 of EndTxn and TxnOffsetCommit is
#: transaction version 2 (KIP-890 part 2: an epoch bump on every transaction, partitions
#: added by Produce and TxnOffsetCommit themselves), which Kafka applies to any v5 request
#: and brokkr's transaction coordinator does not do. Clients send v5 only to a broker that
#: finalizes the feature transaction.version=2, which brokkr does not, so the gap changes
#: nothing they do; no client infers a release from these two.
SHORT_OF_4_1 = {26: (0, 4), 28: (0, 4)}
#: Where brokkr serves Kafka 4.2's versions: share groups (KIP-932) became production-ready
#: in 4.2, whose validVersions (confluentinc/kafka v8.2.0) add ShareFetch and
#: ShareAcknowledge v2 (KIP-1222, Renew acknowledgements) and v1 of WriteShareGroupState
#: and ReadShareGroupStateSummary (DeliveryCompleteCount).
KAFKA_4_2_SHARE = {78: (1, 2), 79: (1, 2), 85: (0, 1), 87: (0, 1)}


def advertised(broker) -> dict[int, tuple[int, int]]:
    body = request_spec(API_VERSIONS).cls(client_software_name="t", client_software_version="1")
    with RawClient(broker.bootstrap_servers) as c:
        response = c.request(API_VERSIONS, 3, body)
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def test_every_api_served_has_kafka_4_1s_versions(brokkr_broker):
    served = advertised(brokkr_broker)
    assert served.keys() <= KAFKA_4_1.keys(), "only APIs a Kafka 4.1 broker serves"
    expected = {key: SHORT_OF_4_1.get(key, KAFKA_4_2_SHARE.get(key, KAFKA_4_1[key])) for key in served}
    assert served == expected
    assert 34 in served and 55 in served, "AlterReplicaLogDirs and DescribeQuorum are served"


def test_kafka_python_takes_brokkr_for_kafka_4_1(brokkr_broker):
    admin = pytest.importorskip("kafka.admin").KafkaAdminClient(bootstrap_servers=brokkr_broker.bootstrap_servers)
    try:
        version = admin.get_broker_version_data(brokkr_broker.broker.node_id).broker_version
    finally:
        admin.close()
    assert version == (4, 1)
