"""brokkr_apis: a plugin adds a Kafka API core does not serve and replaces one core
serves, without touching core; ApiVersions advertises exactly the broker's table."""

from __future__ import annotations

from brokkr.core.apis import Api, collect_apis
from brokkr.core.broker import Broker
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.frames import request_spec, response_spec
from brokkr.core.testing import RawClient

# UpdateFeatures: an API core does not serve (brokkr finalizes no feature flags).
API_VERSIONS, DESCRIBE_CLIENT_QUOTAS, UPDATE_FEATURES = 18, 48, 57
UpdateFeaturesResponse = response_spec(UPDATE_FEATURES).cls
DescribeClientQuotasResponse = response_spec(DESCRIBE_CLIENT_QUOTAS).cls


class FeaturesAndQuotas:
    """Adds UpdateFeatures v2 and replaces DescribeClientQuotas; keeps state on itself."""

    def __init__(self):
        self.handled: list[tuple[int, int]] = []

    async def update_features(self, broker, ctx, request):
        self.handled.append((ctx.api_key, ctx.api_version))
        return UpdateFeaturesResponse(error_code=ErrorCode.NONE, error_message=broker.cluster_id)

    async def describe_client_quotas(self, broker, ctx, request):
        self.handled.append((ctx.api_key, ctx.api_version))
        return DescribeClientQuotasResponse(error_code=ErrorCode.POLICY_VIOLATION, error_message="replaced")

    @hookimpl
    def brokkr_apis(self):
        return [
            Api(UPDATE_FEATURES, 2, 2, self.update_features, lambda r, code: UpdateFeaturesResponse(error_code=code)),
            Api(
                DESCRIBE_CLIENT_QUOTAS,
                0,
                1,
                self.describe_client_quotas,
                lambda r, code: DescribeClientQuotasResponse(error_code=code),
            ),
        ]


def advertised(broker) -> dict[int, tuple[int, int]]:
    with RawClient(broker.bootstrap_servers) as c:
        response = c.request(
            API_VERSIONS, 3, request_spec(API_VERSIONS).cls(client_software_name="t", client_software_version="1")
        )
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def test_a_plugin_adds_an_api_and_replaces_one(brokkr_broker_factory):
    plugin = FeaturesAndQuotas()
    broker = brokkr_broker_factory(plugins=(plugin,))
    apis = advertised(broker)
    assert apis[UPDATE_FEATURES] == (2, 2) and apis[DESCRIBE_CLIENT_QUOTAS] == (0, 1)
    with RawClient(broker.bootstrap_servers) as c:
        cluster = c.request(UPDATE_FEATURES, 2, request_spec(UPDATE_FEATURES).cls(feature_updates=[]))
        quotas = c.request(DESCRIBE_CLIENT_QUOTAS, 1, request_spec(DESCRIBE_CLIENT_QUOTAS).cls(components=[]))
    assert cluster.error_code == ErrorCode.NONE and cluster.error_message == broker.broker.cluster_id
    assert quotas.error_code == ErrorCode.POLICY_VIOLATION and quotas.error_message == "replaced"
    assert plugin.handled == [(UPDATE_FEATURES, 2), (DESCRIBE_CLIENT_QUOTAS, 1)]


def test_without_the_plugin_the_api_is_neither_advertised_nor_served(brokkr_broker):
    apis = advertised(brokkr_broker)
    assert UPDATE_FEATURES not in apis and apis[DESCRIBE_CLIENT_QUOTAS] == (0, 1)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        c.send(UPDATE_FEATURES, 2, request_spec(UPDATE_FEATURES).cls(feature_updates=[]))
        assert c.is_closed_by_peer()


def test_core_apis_come_through_the_hook(tmp_path):
    """Without the built-in API plugin (essential, so taken out here rather than blocked),
    the hook collects only what other plugins add."""
    disabled = "brokkr.plugins.groups,brokkr.plugins.transactions,brokkr.plugins.share"
    broker = Broker(
        {"brokkr.plugins.disabled": disabled, "log.dirs": str(tmp_path)},
        plugins=(FeaturesAndQuotas(),),
        entry_points=False,
    )
    broker.pm.unregister(name="brokkr.core.apis.builtin")
    assert set(collect_apis(broker.hook, broker)) == {UPDATE_FEATURES, DESCRIBE_CLIENT_QUOTAS}
