"""The documents every broker of a cluster shares: ACLs (``acls``), SCRAM credentials
(``scram-credentials``) and client quotas (``client-quotas``), cluster-wide as in Kafka.

:class:`SharedDocuments` is on the broker (``broker.shared_documents``). Alone, a document
is the storage's (``Storage.read_state``/``write_state``), cached after its first read. On a
cluster it is the membership's (:meth:`ClusterMembership.documents`, ZooKeeper's
``/brokkr/documents/<name>``, watched): a write through one broker is read by every broker
once its membership is told. Where the cluster has no document of that name yet (its
first start after an upgrade from lone brokers), each broker reads its own stored one, until
one is written for the cluster (from the document of the broker written through).

A store follows a document through a :class:`FollowedDocument`, which keeps the text it
parsed and parses again only when :meth:`SharedDocuments.changed`: the same document is the
same ``str`` object (an identity check), so a request pays a dictionary look-up, never a
parse. Their write methods answer an awaitable (a cluster's write) or None (written at once).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any


class StoredDocuments:
    """One storage's documents (``Storage.read_state``/``write_state``), each read once and
    cached, written at once: a lone broker's, or a store's built on a bare storage (tools,
    tests)."""

    def __init__(self, storage: Any):
        self.storage = storage
        self._texts: dict[str, str | None] = {}

    def read(self, name: str) -> str | None:
        try:
            return self._texts[name]
        except KeyError:
            text = self._texts[name] = self.storage.read_state(name)
            return text

    def changed(self, name: str, seen: str | None) -> bool:
        return self.read(name) is not seen

    def write(self, name: str, text: str) -> None:
        self.storage.write_state(name, text)
        self._texts[name] = text


def documents_of(source: Any) -> Any:
    """``source`` when it is documents (:class:`SharedDocuments`, :class:`StoredDocuments`),
    else a storage's documents (a store built on a storage keeps working)."""
    return source if hasattr(source, "changed") else StoredDocuments(source)


async def settled(result: Any) -> Any:
    """A store write's result: awaited when it is awaitable (a store on shared documents),
    else as it is (a plugin's synchronous store), as the API handlers take both."""
    return await result if inspect.isawaitable(result) else result


#: What a store has parsed before its first read, or after a write that failed.
_UNREAD: Any = object()


class FollowedDocument:
    """One store's side of one document: it parses the document again only when it changed
    (``parse(text)``, text None: there is none), and writes its changes. A store applies a
    change in memory first, then writes it (:meth:`write`): while its writes are under way
    its memory is ahead of the document, so it is not parsed again (another request of this
    broker builds on the change); if a write fails, the document is read again."""

    def __init__(self, documents: Any, name: str, parse: Callable[[str | None], None]):
        self.documents = documents_of(documents)
        self.name = name
        self._parse = parse
        self._text: Any = _UNREAD  # the text parsed
        self._writing = 0

    def follow(self) -> None:
        """Parse the document again if it changed (another broker's write) since it was parsed."""
        if self._writing == 0 and self.documents.changed(self.name, self._text):
            text = self.documents.read(self.name)
            self._parse(text)
            self._text = text

    def write(self, text: str) -> Awaitable[None] | None:
        """Write ``text`` (the store's memory, changed already): None once written when the
        documents write at once (a storage), else an awaitable to await."""
        self._writing += 1
        try:
            pending = self.documents.write(self.name, text)
        except BaseException:
            self._written(None)
            raise
        if not inspect.isawaitable(pending):
            self._written(text)
            return None

        async def finish() -> None:
            try:
                await pending
            except BaseException:
                self._written(None)
                raise
            self._written(text)

        return finish()

    def _written(self, text: str | None) -> None:
        self._writing -= 1
        if self._writing == 0:  # the last write under way: memory is ``text``, or to be read again
            self._text = _UNREAD if text is None else text
            if text is None:
                self.follow()


class SharedDocuments:
    """name -> text, for this broker alone or for its whole cluster (see the module docstring)."""

    def __init__(self, broker: Any):
        self.broker = broker
        self._stored: StoredDocuments | None = None  # the broker's storage's, read when needed

    def _local(self) -> StoredDocuments:
        storage = self.broker.storage
        if self._stored is None or self._stored.storage is not storage:  # a (re)started broker
            self._stored = StoredDocuments(storage)
        return self._stored

    def read(self, name: str) -> str | None:
        """The document's text (None: there is none): the cluster's, else this broker's."""
        replicas = self.broker.replicas
        if replicas is not None:
            text = replicas.membership.documents().get(name)
            if text is not None:
                return text
        return self._local().read(name)

    def changed(self, name: str, seen: str | None) -> bool:
        """Whether the document is no longer ``seen`` (the text a store last parsed)."""
        return self.read(name) is not seen

    async def write(self, name: str, text: str) -> None:
        """Replace the document: for the whole cluster (BrokkrError when the membership
        refuses it, e.g. too large), else in this broker's storage. :meth:`read` returns
        ``text`` on return."""
        replicas = self.broker.replicas
        if replicas is not None:
            await replicas.membership.set_document(name, text)
        else:
            self._local().write(name, text)
