"""Federated reinforcement learning in heterogeneous environments, compiled end to end with JAX.

The K agents of a federation are one named `vmap` axis, the federated average is a `lax.pmean` over
it, and a whole run is one XLA program. Entry points: `fedjax_rl.configs.train_config` and
`fedjax_rl.experiment.run` (the Python API), `fedjax_rl.cli` (`fedjax-rl`), `fedjax_rl.train` (the
compiled loop), `fedjax_rl.agents` (the algorithms), `fedjax_rl.envs` (the tasks) and
`fedjax_rl.tabular` (tabular FedRQ and QAvg).
"""
