"""InitProducerId (key 22), versions 0-5: producer ids for idempotent producers (Kafka's
KafkaApis.handleInitProducerIdRequest and TransactionCoordinator.handleInitProducerId).

Without a transactional id, Kafka "blindly accepts the request": every call gets a new
producer id (:mod:`brokkr.core.producer_ids`) with epoch 0, also when it names the id and
epoch the producer had (v3+, KIP-360); the request's id and epoch only matter to a
transaction coordinator, and an idempotent producer that must bump its epoch either does
so itself (the Java client) or takes the new id (librdkafka, kafka-python).

With a transactional id, the request belongs to the transaction coordinator of the id's
``__transaction_state`` partition: the built-in plugin :mod:`brokkr.plugins.transactions`
serves this API in place of this module, runs :func:`check` (Kafka's checks: authorization,
a non-empty id, ``transaction.max.timeout.ms``) and hands requests without a transactional
id back here. With that plugin blocked there is no transaction coordinator: after the same
checks this module answers NOT_COORDINATOR, as a Kafka broker that is not the id's
coordinator does.
"""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from ..protocol.records import NO_PRODUCER_ID
from . import Api

KEY = 22
NO_PRODUCER_EPOCH = -1
_R = response_spec(KEY)
InitProducerIdResponse = _R.cls


def error(code: ErrorCode) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH)


def check(broker, ctx, request) -> ErrorCode:
    """The error Kafka answers before any producer id is handed out, or NONE."""
    txn_id = request.transactional_id
    if txn_id is not None:
        if not broker.authorize(ctx, [Action(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)])[0]:
            return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not _may_write_idempotently(broker, ctx):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if (request.producer_id == NO_PRODUCER_ID) != (request.producer_epoch == NO_PRODUCER_EPOCH):
        return ErrorCode.INVALID_REQUEST  # an id without an epoch, or an epoch without an id
    if txn_id is not None:
        if not txn_id:
            return ErrorCode.INVALID_REQUEST
        if not 0 < request.transaction_timeout_ms <= broker.config["transaction.max.timeout.ms"]:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT
    return ErrorCode.NONE


async def handle(broker, ctx, request):
    code = check(broker, ctx, request)
    if code:
        return error(code)
    if request.transactional_id is None:
        return InitProducerIdResponse(
            error_code=ErrorCode.NONE, producer_id=await broker.producer_ids.generate_producer_id(), producer_epoch=0
        )
    return error(ErrorCode.NOT_COORDINATOR)


def _may_write_idempotently(broker, ctx) -> bool:
    """Kafka 3.0+ (KIP-679): IDEMPOTENT_WRITE on the cluster, or WRITE on any topic
    (Kafka's ``authorizeByResourceType``, which brokkr's per-action authorizer hook can
    only answer for the topics that exist). One hook call."""
    actions = [Action(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, True, False)]
    actions += [Action(AclOperation.WRITE, ResourceType.TOPIC, name, False, False) for name in sorted(broker.topics)]
    return any(broker.authorize(ctx, actions))


def error_response(request, code):
    return error(code)


API = Api(KEY, 0, 5, handle, error_response)
