"""The `fedjax-rl` command line: its subcommands (`commands`) and the generated flag table (`flags`)."""
