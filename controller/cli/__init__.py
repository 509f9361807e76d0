"""The `railyard` command: controller and API subcommands here; other packages
add theirs through the `railyard.commands` entry point.
"""
