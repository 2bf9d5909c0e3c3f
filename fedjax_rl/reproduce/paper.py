"""The source paper's experimental settings and reported numbers, as data.

Source: U. Hwang and S. Hong, "Federated Reinforcement Learning in Heterogeneous Environments",
arXiv:2507.14487v1 (2025), https://arxiv.org/abs/2507.14487 (HTML: https://arxiv.org/html/2507.14487v1).
Table 1 compares DQNAvg and FedRDQN, Table 2 DDPGAvg(1), DDPGAvg(2) and FedRDDPG; each row reports
the Average and the Minimum over the K local environments of the final global policy's return.

Reported numbers: transcribed from the paper's LaTeX source (`shared/paper_tables.md` in the
project's shared folder holds the same transcription). Each is (Average, Minimum) as the paper prints
it, with its "±" in `spread`; the paper does not say what the "±" is taken over (seeds or evaluation
episodes), and the per-row omega of FedRDQN / FedRDDPG appears only in its figures' legends, which
the source does not include. Table 2 reports DDPGAvg(2) and FedRDDPG only: DDPGAvg(1) is in the
paper's figures, not in its table, so it has no numbers here. These are data to compare with, not
targets to tune to. In one row the paper's own numbers go against its claim: in MountainCar force
FedRDQN's Minimum (-166.4) is below DQNAvg's (-161.7).
"""

from __future__ import annotations

import dataclasses

from fedjax_rl.core import perturb

SOURCE = ("Hwang & Hong, Federated Reinforcement Learning in Heterogeneous Environments, "
          "arXiv:2507.14487v1, Tables 1-2")
URL = "https://arxiv.org/abs/2507.14487"

# Settings the paper states (the library's defaults carry them: perturb.PAPER_*).
NUM_AGENTS = perturb.PAPER_NUM_AGENTS  # K
SYNC_EVERY = perturb.PAPER_SYNC_EVERY  # E
MAX_RATE = perturb.PAPER_MAX_RATE  # p
EVAL_EPISODES = 5  # episodes per evaluation of the global policy
NUM_SEEDS = 5  # independent runs per row

CLAIM = ("the robust algorithm's Minimum over the local environments exceeds every averaging "
         "baseline's (FedR* - *Avg > 0 on Minimum)")
NOT_REPORTED = "not in the paper's table"


@dataclasses.dataclass(frozen=True)
class PaperRow:
    """One row of a paper table. env_name / param: this library's names (param is the physical
    parameter `envs` perturbs; for the MuJoCo robots a body part). paper_param: the paper's wording.
    reported: algorithm label -> (Average, Minimum) as printed in the paper; spread: label -> the
    "±" printed with them. A label the paper's table does not report is absent."""

    env_name: str
    param: str
    paper_param: str
    reported: dict = dataclasses.field(default_factory=dict)
    spread: dict = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.env_name}/{self.param}"

    @property
    def dir_name(self) -> str:
        """The row's directory in a reproduction's output (`tables.row_dir`)."""
        return f"{self.env_name}__{self.param}"

    def paper_numbers(self, label: str) -> tuple[float | None, float | None]:
        """(Average, Minimum) the paper reports for `label`, (None, None) if its table has no such column."""
        return self.reported.get(label) or (None, None)

    def paper_spread(self, label: str) -> tuple[float | None, float | None]:
        return self.spread.get(label) or (None, None)


def _row(env_name, param, paper_param, baseline, robust, numbers):
    """A PaperRow from the paper's line: numbers = (baseline Average, ±, Minimum, ±, robust Average,
    ±, Minimum, ±), in the paper's column order."""
    b_avg, b_avg_pm, b_min, b_min_pm, r_avg, r_avg_pm, r_min, r_min_pm = numbers
    return PaperRow(env_name, param, paper_param,
                    reported={baseline: (b_avg, b_min), robust: (r_avg, r_min)},
                    spread={baseline: (b_avg_pm, b_min_pm), robust: (r_avg_pm, r_min_pm)})


# Table 1: DQNAvg vs FedRDQN.
TABLE1 = tuple(_row(env, param, paper_param, "DQNAvg", "FedRDQN", numbers) for env, param, paper_param, numbers in (
    ("Acrobot-v1", "gravity", "gravity", (-90.2, 28.7, -110.9, 47.5, -84.7, 26.7, -95.2, 30.7)),
    ("Acrobot-v1", "length", "length", (-83.9, 21.8, -96.1, 26.5, -82.9, 22.0, -92.8, 23.8)),
    ("CartPole-v1", "length", "length", (266.9, 1.8, 266.5, 1.7, 428.8, 1.0, 428.3, 0.7)),
    ("CartPole-v1", "masscart", "mass cart", (340.8, 12.3, 309.4, 33.4, 500.0, 0.0, 500.0, 0.0)),
    ("LunarLander-v3", "gravity", "gravity", (152.9, 119.1, 142.9, 100.8, 175.0, 85.0, 160.2, 91.2)),
    ("LunarLander-v3", "wind", "wind", (141.0, 112.1, 134.2, 118.3, 156.1, 108.9, 148.7, 113.1)),
    ("MountainCar-v0", "gravity", "gravity", (-135.3, 20.3, -148.9, 16.0, -118.6, 13.7, -133.9, 18.4)),
    ("MountainCar-v0", "force", "force", (-136.7, 20.6, -161.7, 11.2, -129.8, 11.8, -166.4, 10.6)),
))

# Table 2: DDPGAvg(2) vs FedRDDPG (DDPGAvg(1) is not in the paper's table). Body parts are named as
# fedjax_rl.envs names them; `reproduce` resolves them only when a Table 2 row runs.
TABLE2 = tuple(_row(env, param, paper_param, "DDPGAvg(2)", "FedRDDPG", numbers) for env, param, paper_param, numbers in (
    ("Ant-v4", "back_left_leg", "back left leg", (2316.9, 925.1, 1569.2, 823.1, 2718.0, 768.2, 2415.5, 720.5)),
    ("Ant-v4", "front_right_leg", "front right leg", (1986.1, 1070.9, 1640.7, 1050.1, 2877.3, 676.2, 2421.8, 608.4)),
    ("Hopper-v4", "torso", "torso", (1946.3, 407.8, 1387.3, 341.2, 2604.5, 382.2, 2102.5, 486.9)),
    ("Hopper-v4", "thigh", "thigh", (1037.5, 233.3, 937.5, 103.6, 2725.4, 481.1, 2086.2, 698.2)),
    ("HalfCheetah-v4", "front_foot", "front foot", (9219.2, 665.3, 8352.6, 766.5, 9942.9, 717.6, 9499.9, 973.8)),
    ("HalfCheetah-v4", "front_shin", "front shin", (11422.8, 649.7, 11295.8, 832.0, 11617.8, 1000.3, 11518.0, 1178.0)),
    ("Walker2d-v4", "left_leg", "left leg", (3411.4, 1343.9, 3186.1, 1482.0, 3971.3, 432.6, 3543.4, 376.6)),
    ("Walker2d-v4", "left_foot", "left foot", (3223.1, 1055.6, 3067.7, 1123.9, 4279.0, 744.4, 4210.2, 724.0)),
))
