"""A federated run: its config, the compiled program (`program.make_train`), the host loop that drives
it block by block (`loop.run`), its run directory and checkpoints, devices and machine records."""
