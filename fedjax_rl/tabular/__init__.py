"""Tabular federated RL: problems, robust operators, FedRQ and QAvg (DESIGN.md section 1)."""

from fedjax_rl.tabular.fedrq import (
    FedRQConfig,
    FedRQResult,
    capped_step_size,
    fedrq,
    make_fedrq,
    qavg,
    theorem_step_size,
)
from fedjax_rl.tabular.mdp import (
    ACTION_NAMES,
    TabularArrays,
    TabularMDP,
    covers,
    kappa,
    omega_min,
    random_mdp,
    stack_arrays,
    support_sizes,
    to_arrays,
    windy_cliff,
)
from fedjax_rl.tabular.robust import (
    agent_operator,
    agent_operators,
    average_operator,
    greedy_policy,
    policy_values,
    robust_backup,
    robust_policy_q,
    robust_policy_value,
    robust_value_iteration,
)


def theorem1_bound(t, gamma: float, sync_every: int):
    """Theorem 1's bound 16 gamma (E - 1) / ((1 - gamma)^3 (t + E)) on ||Q_bar_t - Q_R*||_inf."""
    return 16.0 * gamma * (sync_every - 1) / ((1.0 - gamma) ** 3 * (t + sync_every))


__all__ = [
    "ACTION_NAMES", "FedRQConfig", "FedRQResult", "TabularArrays", "TabularMDP", "agent_operator",
    "agent_operators", "average_operator", "capped_step_size", "covers", "fedrq", "greedy_policy", "kappa", "make_fedrq",
    "omega_min", "policy_values", "qavg", "random_mdp", "robust_backup", "robust_policy_q",
    "robust_policy_value", "robust_value_iteration", "stack_arrays", "support_sizes",
    "theorem1_bound", "theorem_step_size", "to_arrays", "windy_cliff",
]
