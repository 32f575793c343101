"""From one request frame to one response frame (Kafka's RequestChannel + KafkaApis.handle).

Steps: parse the header; close the connection on an API Kafka does not define or
brokkr does not serve (as Kafka does); answer an unsupported version with
UNSUPPORTED_VERSION; decode the body through ``brokkr_decode_request``; run the API's
handler; record its time against the request quota; encode the response. A handler
that fails answers UNKNOWN_SERVER_ERROR (or the code of the BrokkrError it raised) for
the whole request, and the broker carries on.

The response carries the largest throttle time of the request's quotas (byte rates set by
the handler, request time here), and the caller mutes the connection for that long once
the response is sent (KIP-219).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from .apis.api_versions import unsupported_version_response
from .apis.common import NoResponse
from .context import ConnectionInfo, Principal, RequestContext
from .errors import BrokkrError, CloseConnection, CorruptRequest, ErrorCode, UnknownApi
from .protocol.frames import API_VERSIONS_KEY, encode_response, parse_request_header_untrusted, request_spec
from .quotas import BusyTime
from .responses import ResponseParts

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("brokkr.requests")
#: One DEBUG line per answered request, like Kafka's ``kafka.request.logger``.
request_log = logging.getLogger("brokkr.request.logger")


async def handle_frame(broker: Broker, conn: ConnectionInfo, principal: Principal, frame: bytes) -> bytearray | None:
    """The response frame to one request frame, as bytes (file regions read), or None for
    no response (its throttle time dropped: for requests whose connection is never muted)."""
    response, _ = await handle_frame_with_throttle(broker, conn, principal, frame)
    if isinstance(response, ResponseParts):
        try:
            return response.to_bytes()
        finally:
            response.close()
    return response


async def handle_frame_with_throttle(
    broker: Broker, conn: ConnectionInfo, principal: Principal, frame_in: bytes
) -> tuple[bytearray | ResponseParts | None, int]:
    """The response frame (None: no response) and for how many milliseconds the connection
    must then not be read (its throttle time, KIP-219). A frame holding file regions (a
    fetch answered from segment files) is a :class:`ResponseParts`, which the caller sends
    or closes."""
    start = time.perf_counter()
    header, body = parse_request_header_untrusted(frame_in)
    api = broker.apis.get(header.api_key)
    if api is None:
        raise UnknownApi(f"API {header.api_name} (key {header.api_key}) is not served by brokkr")
    version = header.api_version
    if not api.min_version <= version <= api.max_version:
        if header.api_key == API_VERSIONS_KEY:
            return encode_response(API_VERSIONS_KEY, 0, header.correlation_id, unsupported_version_response(broker)), 0
        # Answer in the nearest served version, if the body parses in it; else close.
        nearest = min(max(version, api.min_version), api.max_version)
        request = request_spec(header.api_key).decode(nearest, body)
        log.info("%s v%d is not supported; answering UNSUPPORTED_VERSION as v%d", header.api_name, version, nearest)
        body_out = api.error_response(request, ErrorCode.UNSUPPORTED_VERSION)
        return encode_response(header.api_key, nearest, header.correlation_id, body_out), 0

    # Trailing bytes after the body are ignored, as Kafka ignores them (librdkafka sends some).
    request = broker.hot.brokkr_decode_request(header=header, body=body, broker=broker)
    ctx = RequestContext(conn, principal, header.api_key, version, header.client_id, header.correlation_id)
    busy = BusyTime(time.perf_counter() - start)
    try:
        # Its first step here, with no coroutine in between: most requests end in it.
        finished, response = busy.first_step(api.handle(broker, ctx, request))
        if not finished:
            response = await response
    except (CloseConnection, CorruptRequest):
        raise
    except BrokkrError as exc:
        log.info("%s from %s failed: %s", header.api_name, conn.connection_id, exc)
        response = api.error_response(request, exc.code)
    except Exception:
        log.exception("%s from %s failed", header.api_name, conn.connection_id)
        response = api.error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR)
    usage = ctx.usage
    if response is None or isinstance(response, NoResponse):  # acks=0: exempt from the request quota, as in Kafka
        return None, broker.throttle_ms(ctx, usage) if usage else 0
    usage["request"] = busy.seconds * 1000
    throttle = max(getattr(response, "throttle_time_ms", 0), broker.throttle_ms(ctx, usage))
    if throttle and hasattr(response, "throttle_time_ms"):
        response.throttle_time_ms = throttle
    frame = encode_response(header.api_key, version, header.correlation_id, response)
    if isinstance(frame, list):
        frame = ResponseParts(frame)
    logged = request_log.isEnabledFor(logging.DEBUG)
    observe = broker.hot.brokkr_request_completed
    if observe is None and not logged:
        return frame, throttle
    elapsed_ms = (time.perf_counter() - start) * 1000
    if observe is not None:
        observe(context=ctx, header=header, response=response, elapsed_ms=elapsed_ms, broker=broker)
    if logged:
        request_log.debug(
            "Completed request: %s v%d correlation %d from %s (client %s, principal %s, listener %s): %d bytes in, "
            "%d bytes out, %.3f ms, throttled %d ms",
            header.api_name,
            version,
            header.correlation_id,
            conn.client_host,
            header.client_id,
            principal,
            conn.listener,
            len(frame_in),
            len(frame),
            elapsed_ms,
            throttle,
        )
    return frame, throttle
