"""The mathematics every algorithm shares: settings declarations, the robust losses, the federated
agent axis and its aggregation, per-agent physics perturbation and evaluation."""
