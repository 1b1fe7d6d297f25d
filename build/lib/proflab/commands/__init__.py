"""The ``proflab`` commands, a module per group; ``proflab.cli`` parses the command line and dispatches."""
