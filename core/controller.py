"""The controller's decisions (Kafka's ZooKeeper-mode KafkaController, partition state
machine): run by whichever broker the membership elected, after every cluster change.

- A new partition gets its first state: leader the first live replica of its assignment,
  ISR the live replicas, leader epoch 0.
- A partition whose leader is not live gets a new leader: the first replica, in
  assignment order, that is live and in the ISR (``unclean.leader.election.enable=false``,
  Kafka's default and the only election brokkr makes, so no acknowledged record is lost);
  the leader epoch goes up by one. With no such replica the partition is offline (leader
  -1, the ISR kept) until one comes back.
- Replicas that are not live leave the ISR of partitions whose leader is.

Every write names the version read; a write that loses a race is retried on the next
change, with the state as it then is.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .cluster import PartitionState

if TYPE_CHECKING:
    from .replication import ReplicaManager

log = logging.getLogger("brokkr.controller")
NO_LEADER = -1


class Controller:
    def __init__(self, manager: ReplicaManager):
        self.manager = manager

    async def reconcile(self) -> None:
        m = self.manager.membership
        live = set(m.brokers())
        for name, assignment in list(m.topics().items()):
            for index, replicas in assignment.replicas.items():
                state = m.partition_state(name, index)
                new = self.decide(replicas, state, live, m.controller_epoch)
                if new is not None:
                    written = await m.write_partition_state(name, index, new)
                    if written is not None:
                        log.info(
                            "%s-%d: leader %d at epoch %d, ISR %s",
                            name,
                            index,
                            new.leader,
                            new.leader_epoch,
                            list(new.isr),
                        )

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
            isr = tuple(r for r in state.isr if r in live)
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
