"""Subcommands of the stager CLI (see stager/cli.py)."""
