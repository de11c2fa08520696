"""Operating ahpd on a machine: where it keeps its files, how it is found and stopped.

These modules are the daemon's life outside the protocol. They share one data
directory (``paths.default_data_dir()``, private to the user) holding the
connection token, the runtime record ``ahpd.json`` that says which process
serves which URL, and the control socket that ``ahpd status`` asks for live
counts. Nothing here speaks AHP, and nothing here imports the protocol or state
layers: the command line wires these pieces to the daemon, not the reverse.
"""
