"""Not speed: statistical studies behind the tables' verdicts, and checks of what a result depends on."""
