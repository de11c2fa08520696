"""Automations: prompts run on a schedule, each run in a session of its own.

The catalogue and its runs (``ahp-automations://``) kept in a store of their
own (``catalogue``), each run a session and its first turn (``runs``), the
scheduler that fires them (``scheduler``) on the cron schedule
(``schedule``), and the service with its requests (``automations``). A
feature: it builds sessions and turns through the sessions core; in the host
nothing imports it but the table (the daemon gives the host its service).
"""
