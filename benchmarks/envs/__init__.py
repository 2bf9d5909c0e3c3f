"""Environment stepping: the JAX ports, MuJoCo's engines and the gymnasium bridge against gymnasium."""
