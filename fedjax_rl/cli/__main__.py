"""`python -m fedjax_rl.cli ARGS`, the same as `fedjax-rl ARGS`."""

import sys

from fedjax_rl.cli import commands

if __name__ == "__main__":  # importing the module (the API docs do) runs nothing
    sys.exit(commands.main(sys.argv[1:]))
