"""How AHP frames reach the host: WebSocket, stdio, or in-process.

The transport moves text frames and knows nothing about AHP. Every transport
hands the host the same ``Connection`` (``receive``/``send``/``close``) and
runs the host's ``Handler`` once per connection, in that connection's own
nursery. ``base`` holds the shared rules (a writer task per connection, the
queue limit, the close codes), ``frames`` the bytes of the WebSocket data
frames our writer sends; each other module is one transport.
"""

from ahpd.transport.base import Connection, Handler, run_connection
from ahpd.transport.inprocess import ClientEnd, inprocess_pair, run_inprocess
from ahpd.transport.stdio import serve_stdio
from ahpd.transport.websocket import Listening, serve_websocket

__all__ = [
    "ClientEnd",
    "Connection",
    "Handler",
    "Listening",
    "inprocess_pair",
    "run_connection",
    "run_inprocess",
    "serve_stdio",
    "serve_websocket",
]
