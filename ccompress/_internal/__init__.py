"""Private implementation modules of ccompress: array handling, backends, devices, errors, transports, the rank and work machinery. Nothing here is public API; import from ``ccompress``."""
