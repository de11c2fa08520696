"""Automations: prompts run on a schedule, each run in a session of its own.

The catalogue and its runs (``ahp-automations://``) kept in a store of their
own, and the cron schedule (``schedule``). A feature: it builds sessions and
turns through the sessions core, and nothing imports it but the table.
"""
