"""Authorizers compose: every plugin answers each action ALLOWED, DENIED or no opinion;
DENIED from any wins, whatever the order plugins are registered in; the ACL authorizer's
answer is never shadowed by another plugin's ALLOWED."""

from __future__ import annotations

import pytest
from brokkr.core.authorization import AclOperation, AuthorizationResult, ResourceType
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
