"""Training throughput: agent-steps per second of whole federated programs, against references."""
