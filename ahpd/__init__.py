"""ahpd: a daemon that hosts AI coding agents behind the Agent Host Protocol."""

__version__ = "0.1.0"
