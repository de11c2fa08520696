"""The host with every feature package attached (see ``ahpd.host.table``)."""

from ahpd.host.kernel.host import Host

__all__ = ["Host"]
