"""The ``ragbot`` command line: one module per subcommand, ``main`` in ``ragbot.cli.main.main``."""
