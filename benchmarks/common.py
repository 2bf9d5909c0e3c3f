"""What every benchmark records about the machine it ran on (these machines are shared and noisy,
so the load average is part of the result): `fedjax_rl.machine.describe`, shared with reproduce."""

from __future__ import annotations

from fedjax_rl.machine import describe as machine  # noqa: F401 (what the scripts call)
