"""Layer 3: the device runtime.

Devices over the plugins' SP_ tables (``device``, ``streams``, ``memory``),
the device table and scopes (``placement``), and dispatch: op call ->
attributes -> placement -> kernel -> run (``dispatch``, ``attrs``).
Imports ``framework`` and ``_core`` only."""
