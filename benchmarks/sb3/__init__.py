"""The Stable-Baselines3 reference loops, run under the .venv-bench interpreter as subprocesses of the
throughput benchmarks."""
