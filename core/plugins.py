"""The plugin manager: how built-in and third-party plugins are found and called.

Built-in plugins are module names registered through the same ``register()`` call as
any other plugin, under stable names, so a user can block one with
``brokkr.plugins.disabled=<name>`` and replace it. Third-party plugins load from the
``brokkr`` entry-point group; plugin objects can also be handed to
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

import pluggy

from . import hookspecs
from .errors import ConfigError

hookimpl = pluggy.HookimplMarker("brokkr")
log = logging.getLogger("brokkr")

#: Registered in this order; defaults of firstresult hooks are trylast, so any other
#: plugin that answers wins.
BUILTIN_PLUGINS: tuple[str, ...] = (
    "brokkr.core.default_decoder",
    "brokkr.core.apis.builtin",
    "brokkr.core.validation",
    "brokkr.core.delayed",
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
    "brokkr.plugins.cluster.zookeeper",
)

#: Cannot be blocked: without them the broker cannot parse a request.
ESSENTIAL_PLUGINS = frozenset({"brokkr.core.default_decoder"})


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


def create_plugin_manager(
    plugins: Iterable[object] = (), disabled: Iterable[str] = (), entry_points: bool = True
) -> PluginManager:
    """A plugin manager with brokkr's hookspecs, built-in plugins, entry points and ``plugins``."""
    pm = PluginManager("brokkr")
    pm.add_hookspecs(hookspecs)
    for name in disabled:
        if name in ESSENTIAL_PLUGINS:
            raise ValueError(f"plugin {name} is essential and cannot be disabled")
        pm.set_blocked(name)
    for name in BUILTIN_PLUGINS:
        if not pm.is_blocked(name):
            pm.register(importlib.import_module(name), name=name)
    if entry_points:
        try:
            pm.load_setuptools_entrypoints("brokkr")
        except Exception as exc:
            raise ConfigError(f"a brokkr plugin failed to load: {_failing_entry_point()}: {exc!r}") from exc
    for plugin in plugins:
        pm.register(plugin)
    pm.check_pending()
    return pm


def describe_plugins(pm: pluggy.PluginManager) -> Iterator[tuple[str, object | None, str, str]]:
    """Each registered plugin as ``(name, plugin, origin, where)``: the plugin is None when
    ``brokkr.plugins.disabled`` blocks it; the origin is its distribution and version, or
    "built in", or "passed to Broker"; where is its file (or module)."""
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    for name, plugin in pm.list_name_plugin():
        dist = dists.get(id(plugin))
        if dist is not None:
            origin = f"{dist.project_name} {dist.version}"
        else:
            origin = "built in" if name.startswith("brokkr.") else "passed to Broker"
        yield name, plugin, origin, getattr(plugin, "__file__", type(plugin).__module__)
