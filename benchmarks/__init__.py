"""The benchmarks and studies (not part of the library, not shipped in its wheel). Run one from the
repository's root as `python -m benchmarks.<group>.<name>`; `harness` times cases and writes the one
result format, `common` describes the machine. README.md indexes them by purpose."""
