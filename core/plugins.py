"""The plugin manager: how built-in and third-party plugins are found and called.

Built-in plugins are module names registered through the same ``register()`` call as
any other plugin, under stable names, so a user can block one with
``brokkr.plugins.disabled=<name>`` (unless it is essential: ``BUILTIN_ROLES``) and replace
it. Third-party plugins load from the ``brokkr`` entry-point group, and from the
``brokkr.plugins`` setting (importable modules or ``module:object``, as pytest's ``-p``: a
plugin without packaging); plugin objects can also be handed to
:class:`brokkr.core.broker.Broker` directly (tests, embedding).
"""

from __future__ import annotations

import collections
import importlib
import inspect
import logging
import operator
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs
import pluggy

from . import hookspecs
from .errors import ConfigError
from .listeners import PLAINTEXT, SSL

hookimpl = pluggy.HookimplMarker("brokkr")
log = logging.getLogger("brokkr")

#: Registered in this order; defaults of firstresult hooks are trylast, so any other
#: plugin that answers wins.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "brokkr.core.default_decoder",
    "brokkr.core.apis.builtin",
    "brokkr.core.validation",
    "brokkr.core.append",
    "brokkr.plugins.codecs.none",
    "brokkr.plugins.codecs.gzip",
    "brokkr.plugins.codecs.snappy",
    "brokkr.plugins.codecs.lz4",
    "brokkr.plugins.codecs.zstd",
    "brokkr.plugins.storage.memory",
    "brokkr.plugins.storage.segment",
    "brokkr.plugins.auth.allow_all",
    "brokkr.plugins.auth.ssl_principal",
    "brokkr.plugins.auth.sasl_plain",
    "brokkr.plugins.auth.scram",
    "brokkr.plugins.auth.acl",
    "brokkr.plugins.quota.client_quotas",
    "brokkr.plugins.sinks.spark.sink",
    "brokkr.plugins.metrics.prometheus",
    "brokkr.plugins.groups",
    "brokkr.plugins.transactions",
    "brokkr.plugins.share",
    "brokkr.plugins.schema_registry",
    "brokkr.plugins.cluster.zookeeper",
    "brokkr.plugins.schema_registry.validation",
)


@attrs.frozen
class BuiltinRole:
    """What a built-in plugin is to the broker, so whether ``brokkr.plugins.disabled`` may
    block it: **essential** (never: the broker cannot serve without it), **essential while
    in use** (``in_use`` says which setting of a broker uses it: the storage, the membership,
    the authorizer in use...), or **optional** (blocked, the broker still produces and
    fetches; only what the plugin adds is gone). Replacing a built-in needs no block: the
    defaults are ``trylast`` or give way to the plugin registered last, so a plugin's own
    implementation of the hook answers first."""

    does: str  #: what the broker would lose, said when a block is refused
    essential: bool = False
    in_use: Callable[[Any], str | None] | None = None  #: the broker -> the setting that uses it, or None

    def refusal(self, broker: Any | None) -> str | None:
        """Why blocking it is refused on ``broker`` (None: it may be blocked); without a
        broker (no settings yet), only an essential one is refused."""
        if self.essential:  # replacing it needs no block: a plugin's own implementation answers first
            return f"is essential and cannot be blocked: {self.does}"
        used_by = self.in_use(broker) if self.in_use is not None and broker is not None else None
        return None if used_by is None else f"is essential while {used_by} and cannot be blocked: {self.does}"


def _setting(name: str, *values: str) -> Callable[[Any], str | None]:
    """In use while setting ``name`` has one of ``values`` (no values: while it is set)."""

    def in_use(broker) -> str | None:
        value = broker.config.get(name)
        if not values:
            return f"{name} is set" if value else None
        return f"{name}={value}" if value in values else None

    return in_use


def _listener(protocol: str) -> Callable[[Any], str | None]:
    """In use while a listener has security protocol ``protocol``."""

    def in_use(broker) -> str | None:
        names = [lst.name for lst in broker.listeners if lst.security_protocol == protocol]
        return f"listener {names[0]} is {protocol}" if names else None

    return in_use


def _allow_all_in_use(broker) -> str | None:
    """In use as the authorizer (none configured) or for PLAINTEXT listeners' principals."""
    if not broker.config.get("authorizer.class.name"):
        return "authorizer.class.name is empty"
    return _listener(PLAINTEXT)(broker)


def _codec(name: str) -> BuiltinRole:
    """A compressing codec: unused, blocking it refuses its batches (UNSUPPORTED_COMPRESSION_TYPE)."""
    does = f"it writes the {name} batches compression.type asks for"
    return BuiltinRole(does, in_use=_setting("compression.type", name))


#: Every built-in plugin's role, and why (a test checks each one of BUILTIN_PLUGINS has one).
BUILTIN_ROLES: dict[str, BuiltinRole] = {
    "brokkr.core.default_decoder": BuiltinRole("it decodes every request", essential=True),
    "brokkr.core.apis.builtin": BuiltinRole(
        "it serves Kafka's APIs (ApiVersions, Metadata, Produce, Fetch, ...)", essential=True
    ),
    "brokkr.core.validation": BuiltinRole(
        "it validates every produced batch and gives it its offsets (brokkr_validate_records)", essential=True
    ),
    "brokkr.core.append": BuiltinRole(
        "it holds an acks=-1 answer until the in-sync replicas have the write (brokkr_produce_complete); "
        "without it acks=-1 would mean acks=1",
        essential=True,
    ),
    "brokkr.plugins.codecs.none": BuiltinRole("it reads and writes uncompressed batches", essential=True),
    "brokkr.plugins.codecs.gzip": _codec("gzip"),
    "brokkr.plugins.codecs.snappy": _codec("snappy"),
    "brokkr.plugins.codecs.lz4": _codec("lz4"),
    "brokkr.plugins.codecs.zstd": _codec("zstd"),
    "brokkr.plugins.storage.memory": BuiltinRole("it keeps the logs", in_use=_setting("brokkr.storage", "memory")),
    "brokkr.plugins.storage.segment": BuiltinRole("it keeps the logs", in_use=_setting("brokkr.storage", "segment")),
    "brokkr.plugins.auth.allow_all": BuiltinRole(
        "it gives PLAINTEXT connections their principal and, with no authorizer, allows every action; "
        "without it those connections would be closed and every action denied",
        in_use=_allow_all_in_use,
    ),
    "brokkr.plugins.auth.ssl_principal": BuiltinRole(
        "it gives SSL connections their principal (without it they would be closed)", in_use=_listener(SSL)
    ),
    # a listener whose sasl.enabled.mechanisms names a mechanism no plugin provides is refused
    # at start anyway (core/authenticator.py): blocking one is a choice of mechanisms
    "brokkr.plugins.auth.sasl_plain": BuiltinRole("the SASL mechanism PLAIN"),
    "brokkr.plugins.auth.scram": BuiltinRole("the SASL mechanisms SCRAM-SHA-256 and SCRAM-SHA-512"),
    "brokkr.plugins.auth.acl": BuiltinRole(
        "it is the authorizer in use (without it every action would be denied)",
        # the names acl.NAMES accepts (core does not import plugins)
        in_use=_setting("authorizer.class.name", "acl", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
    ),
    "brokkr.plugins.quota.client_quotas": BuiltinRole(
        "client quotas (blocked: nothing is throttled; AlterClientQuotas, DescribeClientQuotas answer INVALID_REQUEST)"
    ),
    "brokkr.plugins.sinks.spark.sink": BuiltinRole("the Spark Parquet sink"),
    "brokkr.plugins.metrics.prometheus": BuiltinRole("Prometheus metrics and the health endpoint"),
    "brokkr.plugins.groups": BuiltinRole("consumer groups and committed offsets (the group coordinator and its APIs)"),
    "brokkr.plugins.transactions": BuiltinRole("transactions (the transaction coordinator and its APIs)"),
    "brokkr.plugins.share": BuiltinRole(
        "share groups' data path (ShareFetch, ShareAcknowledge) and the share coordinator (__share_group_state)"
    ),
    "brokkr.plugins.cluster.zookeeper": BuiltinRole(
        "it is the cluster membership in use (without it the broker would run alone)",
        in_use=_setting("zookeeper.connect"),
    ),
    "brokkr.plugins.schema_registry": BuiltinRole("the schema registry"),
    "brokkr.plugins.schema_registry.validation": BuiltinRole(
        "schema validation on produce (confluent.key/value.schema.validation)"
    ),
}


def refuse_blocking_essentials(blocked: Iterable[str], broker: Any | None = None) -> None:
    """Raise ConfigError naming the first of ``blocked`` that ``broker``'s settings cannot do
    without (without a broker: the first always essential)."""
    for name in blocked:
        role = BUILTIN_ROLES.get(name)
        refusal = role.refusal(broker) if role is not None else None
        if refusal is not None:
            raise ConfigError(f"brokkr.plugins.disabled: {name} {refusal}")


def _failing_entry_point() -> str:
    """Which entry point of the ``brokkr`` group does not load (``name = module:object``)."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="brokkr"):
        try:
            ep.load()
        except Exception:
            return f"entry point {ep.name} = {ep.value}" + (f" of {ep.dist.name}" if ep.dist else "")
    return "an entry point"


class PluginManager(pluggy.PluginManager):
    """pluggy's plugin manager, telling :class:`HotHooks` when registrations change."""

    def __init__(self, project_name: str):
        super().__init__(project_name)
        self.hot = HotHooks(self)
        self.named: set[str] = set()  # the plugins the brokkr.plugins setting loaded

    def register(self, plugin, name=None):
        try:
            return super().register(plugin, name)
        finally:
            self.hot.forget()

    def unregister(self, plugin=None, name=None):
        try:
            return super().unregister(plugin, name)
        finally:
            self.hot.forget()

    def set_blocked(self, name: str) -> None:
        try:
            super().set_blocked(name)
        finally:
            self.hot.forget()


class ObserverFailures:
    """The exceptions of observer implementations (``hookspecs.OBSERVERS``), which the
    broker swallows: counted per (hook, plugin) in :attr:`counts` (the metrics plugin
    exports them as ``brokkr_observer_failures_total``), and logged once per hook and
    plugin every :attr:`LOG_EVERY_S` seconds at most, the first with its traceback."""

    LOG_EVERY_S = 60.0

    def __init__(self) -> None:
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._logged: dict[tuple[str, str], tuple[float, int]] = {}  # when last logged, the count then
        self.clock = time.monotonic

    def report(self, hook: str, plugin: str, exc: Exception) -> None:
        key = (hook, plugin)
        self.counts[key] += 1
        now = self.clock()
        last = self._logged.get(key)
        if last is None:
            log.error(
                "plugin %s failed in %s; an observer's failure changes nothing, the broker carries on "
                "(logged at most once a minute, counted in brokkr_observer_failures_total)",
                plugin,
                hook,
                exc_info=exc,
            )
        elif now - last[0] >= self.LOG_EVERY_S:
            log.error(
                "plugin %s failed in %s %d more time(s) in the last %.0f s: %r",
                plugin,
                hook,
                self.counts[key] - last[1],
                now - last[0],
                exc,
            )
        else:
            return
        self._logged[key] = (now, self.counts[key])


class HotHooks:
    """Hooks called for every request, resolved once rather than through pluggy on each
    call: ``hot.brokkr_x`` is None when no plugin implements ``brokkr_x`` (the caller then
    skips the call and whatever it would prepare for it), the implementation itself when
    exactly one plain implementation exists (called with the same keyword arguments, and
    returning what pluggy would: its result for a firstresult hook, else a list of the
    non-None results), and pluggy's hook caller otherwise (several implementations, or
    wrappers). Registering or removing a plugin resolves every hook again.

    An observer (``hookspecs.OBSERVERS``) resolves to a function that calls each
    implementation on its own, as pluggy orders them, and reports an exception to
    :attr:`failures` instead of raising it: this is the one place observers are called
    (:meth:`notify` for those off the request path)."""

    def __init__(self, pm: pluggy.PluginManager):
        self._pm = pm
        self._changes = 0  # registrations seen; a resolution raced by one is not kept
        self.failures = ObserverFailures()

    def notify(self, name: str, **kwargs) -> None:
        """Tell observer ``name``'s implementations, if there are any."""
        observe = getattr(self, name)
        if observe is not None:
            observe(**kwargs)

    def forget(self) -> None:
        self._changes += 1
        for name in [n for n in vars(self) if n.startswith("brokkr_")]:
            self.__dict__.pop(name, None)

    def __getattr__(self, name: str):
        if not name.startswith("brokkr_"):
            raise AttributeError(name)
        changes = self._changes
        caller = getattr(self._pm.hook, name)
        impls = caller.get_hookimpls()
        if not impls:
            resolved = None
        elif name in hookspecs.OBSERVERS:
            resolved = _observer(name, caller, impls, self.failures)
        elif len(impls) == 1 and not (impls[0].hookwrapper or impls[0].wrapper):
            resolved = _direct(impls[0], bool(caller.spec and caller.spec.opts.get("firstresult")))
        else:
            resolved = caller
        if changes == self._changes:  # else a plugin came or went meanwhile (another thread)
            setattr(self, name, resolved)
        return resolved


def _direct(impl: pluggy.HookImpl, firstresult: bool):
    """The one implementation, called as pluggy calls it: positionally, with the caller's
    keyword arguments that it names, picked in C (``operator.itemgetter``)."""
    function, names = impl.function, impl.argnames
    if len(names) == 1:
        (name,) = names

        def args(kwargs):
            return (kwargs[name],)

    else:
        args = operator.itemgetter(*names) if names else lambda kwargs: ()
    if firstresult:

        def call_first(**kwargs):
            return function(*args(kwargs))

        return call_first

    def call(**kwargs):
        result = function(*args(kwargs))
        return [] if result is None else [result]

    return call


def _observer(name: str, caller, impls: list[pluggy.HookImpl], failures: ObserverFailures) -> Callable[..., list]:
    """Observer ``name``: each implementation called directly, in pluggy's order, its
    exception reported to ``failures`` and swallowed. With a wrapper among them, pluggy
    calls them all, and an exception is put down to the plugin whose code raised it."""
    if any(impl.hookwrapper or impl.wrapper for impl in impls):

        def observe_wrapped(**kwargs):
            try:
                return caller(**kwargs)
            except Exception as exc:
                failures.report(name, _raised_in(exc, impls), exc)
                return []

        return observe_wrapped
    calls = [(impl.plugin_name, _direct(impl, False)) for impl in reversed(impls)]
    if len(calls) == 1:
        ((plugin, call),) = calls

        def observe_one(**kwargs):
            try:
                return call(**kwargs)
            except Exception as exc:
                failures.report(name, plugin, exc)
                return []

        return observe_one

    def observe(**kwargs):
        results = []
        for plugin, call in calls:
            try:
                results += call(**kwargs)
            except Exception as exc:
                failures.report(name, plugin, exc)
        return results

    return observe


def _raised_in(exc: BaseException, impls: list[pluggy.HookImpl]) -> str:
    """The plugin of the innermost implementation in ``exc``'s traceback ("?" if none)."""
    plugins = {getattr(inspect.unwrap(impl.function), "__code__", None): impl.plugin_name for impl in impls}
    found, tb = "?", exc.__traceback__
    while tb is not None:
        found = plugins.get(tb.tb_frame.f_code, found)
        tb = tb.tb_next
    return found


def import_plugin(spec: str) -> object:
    """The plugin ``brokkr.plugins`` names: an importable module (``my_policy``), or an object
    in one (``my_policy:validator``, dotted for a nested attribute), registered as it is.
    Raises ConfigError naming the entry and why it does not load."""
    module_name, colon, attribute = (part.strip() for part in spec.partition(":"))
    if not module_name or (colon and not attribute):
        raise ConfigError(f"brokkr.plugins: {spec!r} is neither a module nor module:object")
    try:
        plugin = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        hint = " (a module of the current directory needs PYTHONPATH=.)" if exc.name == module_name else ""
        raise ConfigError(f"brokkr.plugins: cannot import {module_name}: {exc}{hint}") from exc
    except Exception as exc:
        raise ConfigError(f"brokkr.plugins: importing {module_name} failed: {exc!r}") from exc
    for name in attribute.split(".") if attribute else ():
        try:
            plugin = getattr(plugin, name)
        except AttributeError:
            raise ConfigError(f"brokkr.plugins: {module_name} has no {attribute} ({spec})") from None
    return plugin


def create_plugin_manager(
    plugins: Iterable[object] = (), disabled: Iterable[str] = (), entry_points: bool = True, named: Iterable[str] = ()
) -> PluginManager:
    """A plugin manager with brokkr's hookspecs, built-in plugins, entry points, the plugins
    ``named`` by the ``brokkr.plugins`` setting (each under the name given; one already
    registered, e.g. through its entry point, is not registered again) and ``plugins``."""
    pm = PluginManager("brokkr")
    pm.add_hookspecs(hookspecs)
    refuse_blocking_essentials(disabled)  # those essential whatever the settings: Broker checks the rest
    for name in disabled:
        pm.set_blocked(name)
    for name in BUILTIN_PLUGINS:
        if not pm.is_blocked(name):
            pm.register(importlib.import_module(name), name=name)
    if entry_points:
        try:
            pm.load_setuptools_entrypoints("brokkr")
        except Exception as exc:
            raise ConfigError(f"a brokkr plugin failed to load: {_failing_entry_point()}: {exc!r}") from exc
    for spec in named:
        plugin = import_plugin(spec)
        if not pm.is_blocked(spec) and not pm.is_registered(plugin):  # as pytest's -p: loaded once
            pm.register(plugin, name=spec)
            pm.named.add(spec)
    for plugin in plugins:
        pm.register(plugin)
    pm.check_pending()
    return pm


#: The origin :func:`describe_plugins` gives brokkr's own plugins.
BUILT_IN = "built in"


def describe_plugins(pm: pluggy.PluginManager) -> Iterator[tuple[str, object | None, str, str]]:
    """Each registered plugin as ``(name, plugin, origin, where)``: the plugin is None when
    ``brokkr.plugins.disabled`` blocks it; the origin is its distribution and version, or
    "brokkr.plugins" (that setting loaded it), or "built in" (:data:`BUILT_IN`), or "passed
    to Broker"; where is its file (or module)."""
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    named = getattr(pm, "named", set())
    for name, plugin in pm.list_name_plugin():
        dist = dists.get(id(plugin))
        if dist is not None:
            origin = f"{dist.project_name} {dist.version}"
        elif name in named:
            origin = "brokkr.plugins"
        else:
            origin = BUILT_IN if name.startswith("brokkr.") else "passed to Broker"
        yield name, plugin, origin, getattr(plugin, "__file__", type(plugin).__module__)
