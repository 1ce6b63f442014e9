"""The version of pluggable."""
VERSION = "0.1.0"
