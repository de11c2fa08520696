"""Resources: the ``resource*`` commands over ``file:`` URIs, resources a
client publishes forwarded to it, and resource watches (``watches``), each
watch a channel of its own.
"""
