"""Authorizers compose: every plugin answers each action ALLOWED, DENIED or no opinion;
DENIED from any wins, whatever the order plugins are registered in; the ACL authorizer's
answer is never shadowed by another plugin's ALLOWED."""

from __future__ import annotations

import pytest
from brokkr.core.authorization import AclOperation, AuthorizationResult, ResourceType, allows_everything
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.testing import RawClient
from brokkr.plugins.auth.acl import AclAuthorizer
from wire import METADATA, PRODUCE, batch, metadata_body, produce_body


class Denies:
    """Denies writes to one topic; no opinion on anything else."""

    def __init__(self, topic: str):
        self.topic = topic

    @hookimpl
    def brokkr_authorize(self, actions):
        return [
            AuthorizationResult.DENIED
            if a.resource_type == ResourceType.TOPIC
            and a.resource_name == self.topic
            and a.operation == AclOperation.WRITE
            else None
            for a in actions
        ]


class AllowsEverything:
    @hookimpl
    def brokkr_authorize(self, actions):
        return [AuthorizationResult.ALLOWED] * len(actions)


class AllowsEverythingFirst(AllowsEverything):
    """Asked before every other authorizer (pluggy's ``tryfirst``)."""

    @hookimpl(tryfirst=True)
    def brokkr_authorize(self, actions):
        return super().brokkr_authorize(actions)


def produce_codes(broker, *topics: str) -> dict[str, int]:
    with RawClient(broker.bootstrap_servers) as c:
        for t in topics:
            c.request(METADATA, 12, metadata_body(t))
        return {
            t: c.request(PRODUCE, 9, produce_body(t, batch())).responses[0].partition_responses[0].error_code
            for t in topics
        }


@pytest.mark.parametrize("order", ["a-first", "b-first"])
def test_two_authorizers_each_deny_their_own_in_either_order(brokkr_broker_factory, order):
    plugins = [Denies("a"), Denies("b")]
    broker = brokkr_broker_factory(plugins=plugins if order == "a-first" else plugins[::-1])
    codes = produce_codes(broker, "a", "b", "c")
    assert codes == {"a": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "b": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "c": 0}


@pytest.mark.parametrize("order", ["acl-first", "plugin-first"])
def test_another_plugins_allow_never_shadows_the_acl_authorizer(brokkr_broker_factory, order):
    config = {"authorizer.class.name": "acl", "allow.everyone.if.no.acl.found": "false"}
    # pluggy calls the plugin registered last first: the ACL authorizer, registered as the
    # broker starts, unless the other one asks to be first
    plugin = AllowsEverything() if order == "acl-first" else AllowsEverythingFirst()
    broker = brokkr_broker_factory(config, plugins=[plugin])
    called = [impl.plugin for impl in reversed(broker.broker.hook.brokkr_authorize.get_hookimpls())]
    acl = next(p for p in called if isinstance(p, AclAuthorizer))
    assert (called.index(acl) < called.index(plugin)) == (order == "acl-first"), "asked in the order named"
    codes = produce_codes(broker, "locked")
    assert codes == {"locked": ErrorCode.TOPIC_AUTHORIZATION_FAILED}, "no ACL allows it: denied"


def test_no_opinion_from_everyone_falls_to_the_default(brokkr_broker_factory):
    broker = brokkr_broker_factory(plugins=[Denies("x")])
    assert produce_codes(broker, "free") == {"free": 0}, "allow-all, the default without an authorizer"
    config = {"authorizer.class.name": "acl", "allow.everyone.if.no.acl.found": "true"}
    broker = brokkr_broker_factory(config, plugins=[Denies("x")])
    assert produce_codes(broker, "free", "x") == {"free": 0, "x": ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_the_built_in_allow_all_alone_answers_unasked_and_a_plugin_that_comes_is_asked(brokkr_broker_factory):
    """``Broker.authorize`` skips the hook while the built-in allow-all is its only
    implementation (``allows_everything``); a plugin registered while the broker runs, or
    a broker with an authorizer configured, is asked for every request, as before."""
    brokkr_broker = brokkr_broker_factory(entry_points=False)  # the test venv's example authorizers left out
    broker = brokkr_broker.broker

    def skipped() -> bool:
        return allows_everything(broker, broker.hot.brokkr_authorize)

    assert brokkr_broker.call(skipped), "allow-all alone: answered without building the actions"
    asked = []
    resolved = broker.hot.brokkr_authorize

    def recorded(**kwargs):
        asked.append(kwargs["actions"])
        return resolved(**kwargs)

    broker.hot.brokkr_authorize = recorded  # what the broker would call; the next registration resolves it again
    assert produce_codes(brokkr_broker, "a", "b") == {"a": 0, "b": 0}
    assert asked == [], "the built-in allow-all, alone, is not called"
    denies = Denies("a")
    brokkr_broker.call(broker.pm.register, denies)
    assert not brokkr_broker.call(skipped)
    assert produce_codes(brokkr_broker, "a", "b") == {"a": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "b": 0}
    brokkr_broker.call(broker.pm.unregister, denies)
    assert brokkr_broker.call(skipped)
    assert produce_codes(brokkr_broker, "a", "b") == {"a": 0, "b": 0}


def test_allow_all_with_an_authorizer_configured_is_not_taken_as_allowing_everything(brokkr_broker_factory):
    config = {"authorizer.class.name": "acl", "allow.everyone.if.no.acl.found": "false"}
    broker = brokkr_broker_factory(config, entry_points=False)
    assert not broker.call(lambda: allows_everything(broker.broker, broker.broker.hot.brokkr_authorize))
    assert produce_codes(broker, "locked") == {"locked": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
