"""Reading runs: the statistics behind every verdict, figures and rendered episodes."""
