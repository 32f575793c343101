"""The controller's decisions (Kafka's ZooKeeper-mode KafkaController, partition state
machine): run by whichever broker the membership elected, after every cluster change.

- A new partition gets its first state: leader the first live replica of its assignment,
  ISR the live replicas, leader epoch 0.
- A partition whose leader is not live gets a new leader: the first replica, in
  assignment order, that is live and in the ISR (``unclean.leader.election.enable=false``,
  Kafka's default and the only election brokkr makes, so no acknowledged record is lost);
  the leader epoch goes up by one. With no such replica the partition is offline (leader
  -1, the ISR kept) until one comes back.
- Replicas that are not live, or no longer replicas (a reassignment completed), leave
  the ISR of partitions whose leader is.

Every write names the version read; a write that loses a race is retried on the next
change, with the state as it then is.

Leaders also move back to each partition's preferred replica (the first of its
assignment): on request (ElectLeaders, :func:`elect`), and with
``auto.leader.rebalance.enable`` every ``leader.imbalance.check.interval.seconds`` for a
broker whose share of partitions not led by their preferred replica exceeds
``leader.imbalance.per.broker.percentage`` (Kafka's defaults: on, 300 s, 10 %).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from .cluster import PartitionState
from .errors import ErrorCode

if TYPE_CHECKING:
    from .replication import ReplicaManager

log = logging.getLogger("brokkr.controller")
NO_LEADER = -1
PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


class Controller:
    def __init__(self, manager: ReplicaManager):
        self.manager = manager
        self._last_balance = 0.0

    async def rebalance_leaders(self, now: float) -> None:
        """auto.leader.rebalance.enable: every leader.imbalance.check.interval.seconds."""
        config = self.manager.broker.config
        if not config["auto.leader.rebalance.enable"]:
            return
        if now - self._last_balance < config["leader.imbalance.check.interval.seconds"]:
            return
        self._last_balance = now
        m = self.manager.membership
        moves = imbalanced(
            m.topics(), m.partition_state, set(m.brokers()), config["leader.imbalance.per.broker.percentage"]
        )
        for name, index in moves:
            state = m.partition_state(name, index)
            new, error = elect(PREFERRED, m.topics()[name].replicas[index], state, set(m.brokers()), m.controller_epoch)
            if new is not None and await m.write_partition_state(name, index, new) is not None:
                log.info("%s-%d: preferred leader %d back at epoch %d", name, index, new.leader, new.leader_epoch)

    async def reconcile(self) -> None:
        m = self.manager.membership
        live = set(m.brokers())
        writes = []
        for name, assignment in list(m.topics().items()):
            for index in sorted(set(assignment.adding) | set(assignment.removing)):
                current = m.topics().get(name)  # each completion rewrites the topic
                if current is not None:
                    await self._complete_reassignment(current, index, live)
            for index, replicas in assignment.replicas.items():
                new = self.decide(replicas, m.partition_state(name, index), live, m.controller_epoch)
                if new is not None:
                    writes.append((name, index, new))
        if not writes:
            return
        for (name, index, new), written in zip(writes, await m.write_partition_states(writes)):
            if written is not None:
                log.info("%s-%d: leader %d at epoch %d, ISR %s", name, index, new.leader, new.leader_epoch, [*new.isr])

    async def _complete_reassignment(self, assignment, index: int, live: set[int]) -> None:
        """Once every target replica is in sync: the leader moves into the target if it is
        leaving, the leaving replicas leave the ISR, then the assignment drops them."""
        m = self.manager.membership
        state = m.partition_state(assignment.name, index)
        target = assignment.target(index)
        if state is None or not set(target) <= set(state.isr):
            return
        isr = tuple(r for r in state.isr if r in target)
        if state.leader not in target:
            candidates = [r for r in target if r in isr and r in live]
            if not candidates:
                return
            new = PartitionState(candidates[0], state.leader_epoch + 1, isr, m.controller_epoch, state.version)
        else:
            new = PartitionState(state.leader, state.leader_epoch, isr, m.controller_epoch, state.version)
        if new != state and await m.write_partition_state(assignment.name, index, new) is None:
            return  # raced: the next change retries
        adding = {p: r for p, r in assignment.adding.items() if p != index}
        removing = {p: r for p, r in assignment.removing.items() if p != index}
        replicas = {**assignment.replicas, index: target}
        await m.update_topic(attrs.evolve(assignment, replicas=replicas, adding=adding, removing=removing))
        log.info("%s-%d: reassigned to %s", assignment.name, index, list(target))

    @staticmethod
    def decide(
        replicas: tuple[int, ...], state: PartitionState | None, live: set[int], controller_epoch: int
    ) -> PartitionState | None:
        """The state to write for one partition, or None when it is right as it is."""
        if state is None:
            alive = tuple(r for r in replicas if r in live)
            leader = alive[0] if alive else NO_LEADER
            return PartitionState(leader, 0, alive or tuple(replicas[:1]), controller_epoch, 0)
        if state.leader in live:
            isr = tuple(r for r in state.isr if r in live and r in replicas)  # a reassignment's leavers go too
            if isr == state.isr:
                return None
            return PartitionState(state.leader, state.leader_epoch, isr, controller_epoch, state.version)
        candidates = [r for r in replicas if r in live and r in state.isr]
        if not candidates:
            if state.leader == NO_LEADER:
                return None
            return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr, controller_epoch, state.version)
        leader = candidates[0]
        isr = tuple(r for r in state.isr if r in live)
        return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch, state.version)


def elect(
    election_type: int, replicas: tuple[int, ...], state: PartitionState, live: set[int], controller_epoch: int
) -> tuple[PartitionState | None, ErrorCode]:
    """An election asked for (ElectLeaders): the state to write, or why there is none.
    Preferred: the first replica, if live and in sync. Unclean: only for a partition with
    no live leader, the first live replica, with a new ISR of itself."""
    if election_type == PREFERRED:
        preferred = replicas[0]
        if state.leader == preferred:
            return None, ErrorCode.ELECTION_NOT_NEEDED
        if preferred not in live or preferred not in state.isr:
            return None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
        return PartitionState(
            preferred, state.leader_epoch + 1, state.isr, controller_epoch, state.version
        ), ErrorCode.NONE
    if state.leader in live:
        return None, ErrorCode.ELECTION_NOT_NEEDED
    alive = [r for r in replicas if r in live]
    if not alive:
        return None, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    in_sync = [r for r in alive if r in state.isr]
    leader = (in_sync or alive)[0]
    isr = state.isr if in_sync else (leader,)
    return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch, state.version), ErrorCode.NONE


def imbalanced(topics, states, live: set[int], percentage: int) -> list[tuple[str, int]]:
    """Partitions to move back to their preferred replica: those of each live preferred
    broker whose share of not-preferred-led partitions is above ``percentage``, and whose
    preferred replica is in sync (Kafka's checkAndTriggerAutoLeaderRebalance)."""
    by_preferred: dict[int, list[tuple[str, int, bool]]] = {}
    for name, assignment in topics.items():
        for index, replicas in assignment.replicas.items():
            state = states(name, index)
            if state is not None and replicas:
                by_preferred.setdefault(replicas[0], []).append((name, index, state.leader == replicas[0]))
    out = []
    for broker, partitions in by_preferred.items():
        if broker not in live:
            continue
        off = [(n, i) for n, i, ok in partitions if not ok]
        if off and 100 * len(off) / len(partitions) > percentage:
            out.extend((n, i) for n, i in off if broker in states(n, i).isr)
    return out


def place_replicas(
    racks: dict[int, str | None], partitions: range, replication_factor: int, start: int, shift: int
) -> dict[int, tuple[int, ...]]:
    """Replicas for ``partitions`` on the brokers of ``racks`` (id: rack), as Kafka's
    AdminUtils places them: leaders round robin from index ``start``, followers at a
    shifting distance (``shift``), so replicas and leaders spread evenly. When brokers
    have racks, the brokers are ordered alternating between racks and each partition's
    replicas go to as many different racks as there are (brokers without a rack count
    as one rack, as KRaft's placer does). Raises ValueError when ``replication_factor``
    exceeds the brokers."""
    aware = any(rack is not None for rack in racks.values())
    if aware:  # Kafka's getRackAlternatedBrokerList
        by_rack: dict[str, list[int]] = {}
        for node, rack in sorted(racks.items()):
            by_rack.setdefault(rack or "", []).append(node)
        columns = [by_rack[rack] for rack in sorted(by_rack)]
        brokers = [c[i] for i in range(max(map(len, columns))) for c in columns if i < len(c)]
    else:
        brokers = sorted(racks)
    n, n_racks = len(brokers), len({racks[b] for b in brokers})
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} larger than the {n} available brokers")
    out = {}
    for p in partitions:
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        used_racks = {racks[brokers[first]]}
        k = 0
        while len(replicas) < replication_factor:
            distance = 1 + ((shift * n_racks if aware else shift) + k) % (n - 1)
            candidate = brokers[(first + distance) % n]
            k += 1
            if candidate in replicas and len(replicas) < n:
                continue  # another broker still has no replica of this partition
            if aware and racks[candidate] in used_racks and len(used_racks) < n_racks:
                continue  # another rack still has no replica of this partition
            replicas.append(candidate)
            used_racks.add(racks[candidate])
        out[p] = tuple(replicas)
    return out
