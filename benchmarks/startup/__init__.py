"""What a process pays before it trains: the command line's start, the compilation cache, the cold test suite."""
