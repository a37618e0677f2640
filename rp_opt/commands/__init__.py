"""Subcommands of ``rp-opt``; each module defines ``register(subparsers)``."""
