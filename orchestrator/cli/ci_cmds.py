"""ci github, ci k8s."""

COMMANDS: list = []
