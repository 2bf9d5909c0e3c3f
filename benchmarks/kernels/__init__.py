"""The parts of a training step: matrix products, the gradient step against its ceiling, aggregation rules."""
