"""The top layer: tools for plugin authors and users. The conformance kit
(``check``), the command line (``cli``) and test helpers that prove where
work ran (``testing``). May import every layer below."""
