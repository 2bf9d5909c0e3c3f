"""FedRQ vs QAvg on the heterogeneous windy-cliff gridworld: a table and a figure (a few seconds on CPU). ::

    from fedjax_rl.tabular.demo import run_demo
    summary = run_demo("runs/demo")

FedRQ runs with omega = omega_min (the smallest omega whose P_omega covers every agent's kernel);
QAvg is the same run with omega = 0. Both use exact local updates, E local steps between averages
and Theorem 1's step sizes. Reported for each algorithm's final greedy policy:

  * worst case: its worst-case value over P_omega at the start state (robust policy evaluation);
  * agent k: its ordinary value in agent k's own environment at the start state (linear solve);
  * avg / min over the K agents.
"""

from __future__ import annotations

import os
import time

import jax
import numpy as np

from fedjax_rl.tabular.fedrq import fedrq
from fedjax_rl.tabular.mdp import ACTION_NAMES, DEFAULT_WIND, omega_min, to_arrays, windy_cliff
from fedjax_rl.tabular.robust import greedy_policy, policy_values, robust_policy_value, robust_value_iteration

_ARROWS = "^>v<"


def _policy_grid(mdp, policy, height, width) -> list[str]:
    rows = []
    for row in range(height):
        cells = []
        for col in range(width):
            s = row * width + col
            name = mdp.names[s]
            cells.append("G" if name.endswith("G") else "C" if name.endswith("C") else _ARROWS[int(policy[s])])
        rows.append(" ".join(cells))
    return rows


def run_demo(
    out_dir: str,
    wind=DEFAULT_WIND,
    height: int = 4,
    width: int = 6,
    gamma: float = 0.9,
    sync_every: int = 10,
    num_rounds: int = 400,
    verbose: bool = True,
) -> dict:
    """Run FedRQ and QAvg on `windy_cliff(wind, height, width, gamma)`, print a table, write
    `tabular_demo.png` to `out_dir` and return the numbers as a dict."""
    os.makedirs(out_dir, exist_ok=True)
    start_time = time.time()
    mdp = windy_cliff(wind, height, width, gamma)
    problem = to_arrays(mdp)
    omega = omega_min(mdp)
    s0 = mdp.start_state
    algorithms = {"FedRQ": omega, "QAvg": 0.0}
    results, rows = {}, {}
    for name, w in algorithms.items():
        res = fedrq(mdp, w, num_rounds, sync_every)  # gaps against this omega's fixed point of T_bar
        policy = greedy_policy(res.q_bar)
        worst = float(robust_policy_value(problem, policy, omega)[s0])
        per_agent = np.asarray(policy_values(mdp, policy)[:, s0])
        results[name] = res
        rows[name] = dict(
            omega=float(w),
            worst_case=worst,
            per_agent=per_agent.tolist(),
            avg=float(per_agent.mean()),
            min=float(per_agent.min()),
            final_gap=float(res.gaps[-1]),
            policy=_policy_grid(mdp, np.asarray(policy), height, width),
        )
    optimum = float(robust_policy_value(problem, greedy_policy(robust_value_iteration(problem, omega)), omega)[s0])

    K = mdp.num_agents
    header = f"{'algorithm':<8} {'omega':>6} {'worst case':>10} " + " ".join(
        f"{'agent ' + str(k) + ' (' + format(wind[k], '.2f') + ')':>16}" for k in range(K)
    ) + f" {'avg':>7} {'min':>7}"
    lines = [
        f"windy cliff {height}x{width}, K={K} agents, wind theta_k = {list(wind)}, gamma={gamma}, "
        f"E={sync_every}, {num_rounds} rounds; omega_min = {omega:.3f}",
        "values at the start state of each algorithm's greedy policy "
        "(worst case over P_omega; ordinary value in each agent's environment):",
        header,
    ]
    for name, row in rows.items():
        lines.append(
            f"{name:<8} {row['omega']:>6.3f} {row['worst_case']:>10.4f} "
            + " ".join(f"{v:>16.4f}" for v in row["per_agent"])
            + f" {row['avg']:>7.4f} {row['min']:>7.4f}"
        )
    lines.append(f"robust optimum (greedy policy of Q_R*): worst case {optimum:.4f}")
    lines.append("greedy policies (^ > v < ; C cliff, G goal):")
    for r_fed, r_avg in zip(rows["FedRQ"]["policy"], rows["QAvg"]["policy"]):
        lines.append(f"  FedRQ  {r_fed}    QAvg  {r_avg}")

    path = os.path.join(out_dir, "tabular_demo.png")
    _plot(path, results, rows, omega, gamma, sync_every, wind)
    elapsed = time.time() - start_time
    lines.append(f"figure: {path}  ({elapsed:.1f} s)")
    table = "\n".join(lines)
    if verbose:
        print(table)
    return dict(
        omega_min=omega,
        algorithms=rows,
        robust_optimum=optimum,
        figure=path,
        table=table,
        seconds=elapsed,
        backend=jax.default_backend(),
        actions=list(ACTION_NAMES),
    )


def _plot(path, results, rows, omega, gamma, sync_every, wind) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedjax_rl.tabular import theorem1_bound

    fig, (ax_gap, ax_val) = plt.subplots(1, 2, figsize=(11, 4))
    t = np.arange(1, len(results["FedRQ"].gaps))
    for name, res in results.items():
        label = f"{name} (omega={rows[name]['omega']:.2f}) vs its fixed point"
        ax_gap.loglog(t, np.asarray(res.gaps)[1:], label=label)
    ax_gap.loglog(t, theorem1_bound(t, gamma, sync_every), "k--", label="Theorem 1 bound")
    ax_gap.set_xlabel("local step t")
    ax_gap.set_ylabel("||Q_bar_t - target||_inf")
    ax_gap.set_title(f"convergence (E={sync_every})")
    ax_gap.legend(fontsize=8)

    K = len(wind)
    x = np.arange(K + 1)
    width = 0.38
    for i, name in enumerate(rows):
        vals = [rows[name]["worst_case"]] + rows[name]["per_agent"]
        ax_val.bar(x + (i - 0.5) * width, vals, width, label=name)
    ax_val.set_xticks(x, ["worst case\nover P_omega"] + [f"agent {k}\ntheta={wind[k]:.2f}" for k in range(K)], fontsize=8)
    ax_val.set_ylabel("value at the start state")
    ax_val.set_title(f"greedy policies, windy cliff (omega_min={omega:.2f})")
    ax_val.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
