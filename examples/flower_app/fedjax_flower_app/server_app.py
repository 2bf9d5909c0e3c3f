"""The ServerApp: the run's settings from the app's run config (pyproject.toml's
[tool.flwr.app.config], `flwr run --run-config`), the library's aggregation rule, the run directory
that `fedjax-rl compare` and `plot` read."""

from fedjax_rl.flower.apps import server_app

app = server_app()
