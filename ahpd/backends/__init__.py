"""Agent backends: what the host drives a conversation through.

``port`` is the one narrow interface every backend implements; ``translate``
is the pure function from a backend's events to AHP actions. The host knows
nothing about any particular agent.
"""
