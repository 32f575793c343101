"""A classic group's state: members, generation, the selected protocol and Kafka's
states (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead).

Theory of operation (Kafka's ClassicGroup; the operations are in ``classic_protocol``):
a member joins (JoinGroup); the group prepares a rebalance and waits until every known
member has rejoined or the rebalance timeout passes; then it starts a new generation,
picks the protocol every member supports that most members prefer, and answers every
parked JoinGroup, the leader's with all members' metadata. The group then completes the
rebalance: the leader's SyncGroup carries the assignments, which are written to
``__consumer_offsets`` and handed to every parked SyncGroup; the group is Stable. Members
heartbeat within their session timeout or are removed, which starts another rebalance.
The assignment bytes are the clients' own: the broker relays them untouched.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter

import attrs
from brokkr.core.errors import CorruptRequest
from brokkr.core.protocol.consumer_protocol import decode_subscription

CONSUMER_PROTOCOL_TYPE = "consumer"


class ClassicState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@attrs.define(eq=False)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    #: (name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    #: The parked JoinGroup / SyncGroup of this member, if any.
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None
    #: Its session expiry timer (reset by every request of the member).
    expiry: asyncio.TimerHandle | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        return next(name for name, _ in self.protocols if name in candidates)

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@attrs.define(eq=False)
class ClassicGroup:
    group_id: str
    state: ClassicState = ClassicState.EMPTY
    #: Wall-clock ms of the last state change (Kafka's currentStateTimestamp).
    state_timestamp: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = attrs.field(factory=dict)
    #: group.instance.id -> member id of each static member.
    static_members: dict[str, str] = attrs.field(factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED and not rejoined yet (KIP-394),
    #: each with its expiry timer.
    pending_members: dict[str, asyncio.TimerHandle | None] = attrs.field(factory=dict)
    #: Members of the current generation that have not sent SyncGroup yet.
    pending_sync: set[str] = attrs.field(factory=set)
    #: The running join (or initial-delay) and sync timers.
    join_timer: asyncio.TimerHandle | None = None
    sync_timer: asyncio.TimerHandle | None = None
    #: The join timer is the initial rebalance delay of a group leaving Empty, which only
    #: its expiry ends; a member joined during it (Kafka's InitialDelayedJoin, newMemberAdded).
    initial_join: bool = False
    new_member_added: bool = False

    type = "classic"

    def transition(self, state: ClassicState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp = now_ms

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_empty(self) -> bool:
        return not self.members

    def awaiting_join(self) -> list[ClassicMember]:
        return [m for m in self.members.values() if m.join_waiter is not None]

    def all_members_joined(self) -> bool:
        """Kafka's hasAllMembersJoined: every member rejoined and no member id is pending."""
        return not self.pending_members and all(m.join_waiter is not None for m in self.members.values())

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join (Kafka's supportsProtocols)."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        return any(name in self.candidate_protocols() for name, _ in protocols)

    def select_protocol(self) -> str:
        """Of the protocols all members support, the one most members prefer (ties: the
        first in the preference order of the first member that votes for it)."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda name: (votes[name], -list(votes).index(name)))

    def add(self, member: ClassicMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.is_static:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        if self.initial_join:
            self.new_member_added = True

    def remove(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.expiry is not None:
            member.expiry.cancel()
        if member.is_static and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def subscribed_topics(self) -> set[str] | None:
        """The topics a Stable consumer group's members subscribe to, or None when not known
        (another protocol type, or metadata that does not parse)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(decode_subscription(m.metadata(self.protocol_name)).topics)
        except (CorruptRequest, ValueError):
            return None
        return topics
