"""The source paper's experimental settings and reported numbers, as data.

Source: U. Hwang and S. Hong, "Federated Reinforcement Learning in Heterogeneous Environments",
arXiv:2507.14487v1 (2025), https://arxiv.org/abs/2507.14487 (HTML: https://arxiv.org/html/2507.14487v1).
Table 1 compares DQNAvg and FedRDQN, Table 2 DDPGAvg(1), DDPGAvg(2) and FedRDDPG; each row reports
the Average and the Minimum over the K local environments of the final global policy's return.

Reported numbers: NOT YET TRANSCRIBED. The stored copy of the paper reachable from this project's
tools (the search corpus) returns only the opening of the HTML page (abstract and introduction), not
the tables, so every paper number below is `None` and every output prints it as "n/a". Filling them
in is a data-only change: put (Average, Minimum) pairs into `TABLE1` / `TABLE2` from the paper's
Tables 1 and 2 and nothing else needs to change. Until then the comparison with the paper rests
on its stated claim (from the abstract: the robust algorithms outperform the averaging baselines
across the heterogeneous environments), which `CLAIM` records and the tables check row by row on the
Minimum.
"""

from __future__ import annotations

import dataclasses

from fedjax_rl import heterogeneity

SOURCE = ("Hwang & Hong, Federated Reinforcement Learning in Heterogeneous Environments, "
          "arXiv:2507.14487v1, Tables 1-2")
URL = "https://arxiv.org/abs/2507.14487"

# Settings the paper states (the library's defaults carry them: heterogeneity.PAPER_*).
NUM_AGENTS = heterogeneity.PAPER_NUM_AGENTS  # K
SYNC_EVERY = heterogeneity.PAPER_SYNC_EVERY  # E
MAX_RATE = heterogeneity.PAPER_MAX_RATE  # p
EVAL_EPISODES = 5  # episodes per evaluation of the global policy
NUM_SEEDS = 5  # independent runs per row

CLAIM = ("the robust algorithm's Minimum over the local environments exceeds every averaging "
         "baseline's (FedR* - *Avg > 0 on Minimum)")
NOT_TRANSCRIBED = "n/a"


@dataclasses.dataclass(frozen=True)
class PaperRow:
    """One row of a paper table. env_name / param: this library's names (param is the physical
    parameter `envs` perturbs; for the MuJoCo robots a body part). paper_param: the paper's wording.
    reported: algorithm label -> (Average, Minimum) as printed in the paper, None where not
    transcribed."""

    env_name: str
    param: str
    paper_param: str
    reported: dict = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.env_name}/{self.param}"

    def paper_numbers(self, label: str) -> tuple[float | None, float | None]:
        return self.reported.get(label) or (None, None)


TABLE1 = (
    PaperRow("Acrobot-v1", "gravity", "gravity"),
    PaperRow("Acrobot-v1", "length", "length"),
    PaperRow("CartPole-v1", "length", "length"),
    PaperRow("CartPole-v1", "masscart", "masscart"),
    PaperRow("LunarLander-v3", "gravity", "gravity"),
    PaperRow("LunarLander-v3", "wind", "wind"),
    PaperRow("MountainCar-v0", "gravity", "gravity"),
    PaperRow("MountainCar-v0", "force", "force"),
)

# Body parts named as the MuJoCo environments (developed on another branch) are expected to name
# them; `reproduce` resolves them only when a Table 2 row runs and says what is missing.
TABLE2 = (
    PaperRow("Ant-v4", "back_left_leg", "back left leg"),
    PaperRow("Ant-v4", "front_right_leg", "front right leg"),
    PaperRow("Hopper-v4", "torso", "torso"),
    PaperRow("Hopper-v4", "thigh", "thigh"),
    PaperRow("HalfCheetah-v4", "front_foot", "front foot"),
    PaperRow("HalfCheetah-v4", "front_shin", "front shin"),
    PaperRow("Walker2d-v4", "left_leg", "left leg"),
    PaperRow("Walker2d-v4", "left_foot", "left foot"),
)
