"""The host with every feature package attached: what the daemon runs.

The kernel (``ahpd.host.kernel``) knows connections, channels and the bus;
this is the one place that builds the features around it (sessions,
terminals, resource watches, customizations, telemetry) and hands the
kernel the joined tables and hooks of ``ahpd.host.table``.
"""

from __future__ import annotations

from typing import Any

from ahpd.host import table
from ahpd.host.customizations import customizations
from ahpd.host.kernel import host as kernel
from ahpd.host.resources.watches import Watches
from ahpd.host.sessions.manager import SessionManager
from ahpd.host.terminals.terminals import Terminals


class Host(kernel.Host):
    def __init__(
        self,
        *,
        backends: dict[str, Any] | None = None,
        session_store: Any = None,
        stores: tuple[Any, ...] = (),
        telemetry: Any = None,
        terminals: Any = None,
        **kernel_args: Any,
    ) -> None:
        super().__init__(
            stores=(session_store, *stores),
            commands=table.COMMANDS,
            notifications=table.NOTIFICATIONS,
            client_actions=table.CLIENT_ACTIONS,
            hooks=table.KERNEL_HOOKS,
            **kernel_args,
        )
        #: Sessions and their agents; None for a host that runs no agents.
        self.sessions = (
            SessionManager(self, backends, session_store, table.SESSION_HOOKS) if backends is not None else None
        )
        if self.sessions is not None:
            self.seed_root(agents=self.sessions.agents(), activeSessions=self.sessions.count())
        #: The terminals, over the terminals port given (None: this host runs none).
        self.terminals = Terminals(self, terminals) if terminals is not None else None
        #: Logs, traces and metrics on the ``ahp-otlp:`` channels (``ahpd.host.telemetry``).
        self.telemetry = telemetry
        if telemetry is not None:
            telemetry.attach(self)
        #: Resource watches, each in its own nursery (``ahpd.host.resources.watches``).
        self.watches = Watches(self)
        if self.sessions is not None:
            customizations.attach(self)  # the plugins clients hand over

    def services(self) -> list[Any]:
        """The watches, terminals, sessions and automations, in that order
        (an automation's run makes a session)."""
        return [self.watches, *(s for s in (self.terminals, self.sessions, self.automations) if s is not None)]
