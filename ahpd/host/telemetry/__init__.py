"""Telemetry: the daemon's logs, traces and metrics on the ``ahp-otlp:``
channels as OTLP/JSON, and to a collector when one is configured.
"""
