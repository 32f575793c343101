"""An authorizer plugin for tests that refuse one thing and allow the rest."""

from __future__ import annotations

from collections.abc import Callable

from brokkr.core.authorization import Action, AuthorizationResult
from brokkr.core.plugins import hookimpl


class Deny:
    """Answers DENIED for the actions ``rule`` matches and ALLOWED for every other one."""

    def __init__(self, rule: Callable[[Action], bool]):
        self.rule = rule

    @hookimpl
    def brokkr_authorize(self, actions):
        return [AuthorizationResult.DENIED if self.rule(a) else AuthorizationResult.ALLOWED for a in actions]
