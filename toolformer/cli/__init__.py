"""The command line, ``toolformer <command>``: the table of commands and the exit codes
(:mod:`~toolformer.cli.app`), the parser (:mod:`~toolformer.cli.parser`), and one module per command group."""
