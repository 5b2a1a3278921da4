"""Settings, split by environment: base (shared), local (scripts/dev), test (pytest), production.

Every value that differs between machines comes from the environment; see docs/configuration.md.
"""
