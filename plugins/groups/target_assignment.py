"""What a consumer group subscribes to, and its target assignment (Kafka's
computeSubscriptionMetadata, regular expression resolution and TargetAssignmentBuilder).

The group's subscription is the union of the topic names its members list and the topics
their regular expressions match. Its *subscription metadata* (each such topic's id and
partition count, as they exist now) is stored in a ConsumerGroupPartitionMetadata record;
when the topics change (created, deleted, grown) the metadata differs from the stored one,
which bumps the group epoch and so recomputes the target assignment.

Regular expressions match whole topic names with RE2 (Google's library, of which Kafka's
RE2/J is the Java port: the same syntax, ``fullmatch`` as RE2/J's ``matches()``); what does
not compile is refused with INVALID_REGULAR_EXPRESSION. RE2 matches in time linear in the
name and bounds its memory per pattern, so no pattern a member sends can make the
coordinator backtrack (Python's ``re`` could be made to take exponential time).

Resolving them is a cache of the topic list, not state: it is not stored and, unlike
Kafka (which resolves asynchronously and stores the result in
ConsumerGroupRegularExpression records, a type brokkr has no schema for), it is done at
once in the heartbeat that needs it, so a member subscribing by regex gets its partitions
in its first answer. It is redone when the group's regexes change, when the broker's set
of topics changes, and otherwise every :data:`REGEX_REFRESH_MS`, as Kafka's batch refresh.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import attrs
import re2

from .assignor_spec import Assignor, MemberSpec
from .consumer_group import ConsumerGroup, TopicMetadata
from .consumer_member import Assignment, ConsumerMember
from .consumer_records import Record, assignment_epoch, target_assignment

#: Kafka's REGEX_BATCH_REFRESH_INTERVAL_MS.
REGEX_REFRESH_MS = 10_000


class TopicsView(Protocol):
    """The topics of the cluster as a group coordinator sees them."""

    #: Changes whenever topics are created or deleted.
    version: int

    def lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        """The topic's id and partition count, or None if it does not exist."""

    def names(self) -> Iterable[str]: ...


@attrs.define
class RegexCache:
    """A group's resolved regexes (soft state, kept on the group object)."""

    resolved: dict[str, frozenset[str]] = attrs.field(factory=dict)
    version: int | None = None
    refreshed_at: int = 0


def compile_regex(regex: str) -> re2._Regexp:
    """The compiled RE2 pattern; ValueError with the reason when it does not compile."""
    options = re2.Options()
    options.log_errors = False  # a member's bad pattern is its error, not the broker's log's
    try:
        return re2.compile(regex, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        raise ValueError(reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) from None


def resolve_regexes(
    group: ConsumerGroup,
    regexes: Iterable[str],
    topics: TopicsView,
    now_ms: int,
    describable: Callable[[list[str]], set[str]] | None = None,
) -> dict[str, frozenset[str]]:
    """The topics each of ``regexes`` matches, from the group's cache when it is fresh.
    ``describable`` filters out the topics the requesting principal may not DESCRIBE, as
    Kafka's resolution does with the context of the member that triggered it."""
    cache: RegexCache = getattr(group, "regex_cache", None) or RegexCache()
    wanted = set(regexes)
    fresh = cache.version == topics.version and now_ms < cache.refreshed_at + REGEX_REFRESH_MS
    if fresh and wanted <= set(cache.resolved):
        return {r: cache.resolved[r] for r in wanted}
    patterns = {}
    for regex in wanted:
        try:
            patterns[regex] = compile_regex(regex)
        except ValueError:
            patterns[regex] = None  # refused when it arrived; a loaded one matches nothing
    names = list(topics.names())
    matched = {r: [n for n in names if p is not None and p.fullmatch(n)] for r, p in patterns.items()}
    if describable is not None:
        allowed = describable(sorted({n for ns in matched.values() for n in ns}))
        matched = {r: [n for n in ns if n in allowed] for r, ns in matched.items()}
    cache.resolved = {r: frozenset(ns) for r, ns in matched.items()}
    cache.version, cache.refreshed_at = topics.version, now_ms
    group.regex_cache = cache
    return dict(cache.resolved)


def subscription_metadata(names: Iterable[str], topics: TopicsView) -> dict[str, TopicMetadata]:
    """The metadata of the subscribed topics that exist."""
    out = {}
    for name in names:
        found = topics.lookup(name)
        if found is not None:
            out[name] = TopicMetadata(found[0], name, found[1])
    return out


def subscribed_ids(
    member: ConsumerMember, metadata: Mapping[str, TopicMetadata], resolved: Mapping[str, frozenset[str]]
) -> frozenset[uuid.UUID]:
    """The ids of the existing topics the member subscribes to, by name or regex."""
    names = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex:
        names |= resolved.get(member.subscribed_topic_regex, frozenset())
    return frozenset(metadata[n].topic_id for n in names if n in metadata)


def build_target(
    group: ConsumerGroup,
    epoch: int,
    assignor: Assignor,
    metadata: Mapping[str, TopicMetadata],
    resolved: Mapping[str, frozenset[str]],
    updated: ConsumerMember | None = None,
    removed: str | None = None,
) -> tuple[list[Record], dict[str, Assignment]]:
    """The new target assignment at ``epoch`` (TargetAssignmentBuilder): the members with
    ``updated`` added or replaced and ``removed`` left out, each starting from its current
    target (a static member replacing another starts from the instance's). Returns the
    records of the members whose target changed, then the assignment epoch's record."""
    members = dict(group.members)
    if removed is not None:
        members.pop(removed, None)
    previous_targets = dict(group.target_assignment)
    if updated is not None:
        replaced = group.static_members.get(updated.instance_id) if updated.instance_id is not None else None
        if replaced is not None and replaced != updated.member_id:
            members.pop(replaced, None)
            previous_targets.setdefault(updated.member_id, group.target_assignment.get(replaced, {}))
        members[updated.member_id] = updated
    specs = {
        member_id: MemberSpec(
            subscribed_ids(member, metadata, resolved),
            previous_targets.get(member_id, {}),
            member.instance_id,
            member.rack_id,
        )
        for member_id, member in sorted(members.items())
    }
    topic_sizes = {m.topic_id: m.partitions for m in metadata.values()}
    targets = assignor(specs, topic_sizes)
    records = [
        target_assignment(group.group_id, member_id, targets.get(member_id, {}))
        for member_id in specs
        if member_id not in group.target_assignment or targets.get(member_id, {}) != group.target_assignment[member_id]
    ]
    records.append(assignment_epoch(group.group_id, epoch))
    return records, targets
