"""The `proctor` command line: one module per command, each parses and delegates."""
