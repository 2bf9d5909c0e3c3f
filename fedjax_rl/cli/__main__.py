"""`python -m fedjax_rl.cli ARGS`, the same as `fedjax-rl ARGS`."""

import sys

from fedjax_rl.cli import commands

sys.exit(commands.main(sys.argv[1:]))
