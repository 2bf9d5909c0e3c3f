"""Federations of real processes: the library's algorithms as Flower apps (`pip install fedjax-rl[flower]`).

`federation` is the plain-JAX part (one agent as a process, the server's aggregation); `strategy`
makes the library's aggregation rules Flower strategies (`RuleStrategy`, which a Flower user can take
alone); `apps` builds Flower's ClientApp and ServerApp from them. Nothing else in the library imports this package, so
`import fedjax_rl` and the command line never import Flower.
"""
