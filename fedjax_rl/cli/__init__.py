"""The `fedjax-rl` command line: its subcommands (`commands`, with `reproduce` in `reproduce_command`),
what they share to build their arguments (`arguments`) and the generated flag table (`flags`)."""
