"""publish, ls, show, pull (registry)."""

COMMANDS: list = []
