"""Ports: the small doors through which ahpd reaches outside systems.

A port knows its outside system and nothing of the host, the protocol's
transport or the backends (an import-layering test holds it to that), so
every layer that needs, say, the filesystem goes through one implementation
of it. ``ports.fs`` is the filesystem, confined to one directory;
``ports.notify`` hears it change (one inotify instance for the daemon);
``ports.automation_store`` keeps the automations (SQLite).
"""
