"""What a run records as its configuration (config.json, finished.json, a checkpoint's extras), how two
records are compared, and how a record written by an older version is read: `as_recorded` fills the
fields it lacks (`UNRECORDED_BEFORE`), and `recorded_config` leaves out the fields whose value every
older record implied, so that a run directory resumes and reads back across versions."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence

from fedjax_rl.agents.base import REVISION
from fedjax_rl.training import configs


def config_to_dict(config) -> dict:
    """What a run directory records as its configuration: every setting but those that change no
    number (`configs.NOT_IDENTITY`): `cpu_dots`, which only rounds differently (like another CPU;
    the library a run used is in its metrics.json, "cpu_dots"), and `tensorboard`. A run resumes and
    reads back with either value of them."""
    return configs.identity_fields(dataclasses.asdict(config))


def recorded_config(config, num_seeds: int, seed: int, grid: dict[str, Sequence[float]] | None = None,
                    run_batch: int | None = None, first_seed: int = 0) -> tuple[dict, int | None]:
    """What a run directory's config.json records (a checkpoint resumes only into the same), and the
    run_batch that shapes the program: None when every run fits in one vmap."""
    config_dict = {**config_to_dict(config), "num_seeds": num_seeds, "seed": seed, **first_seed_field(first_seed),
                   "agent_revision": REVISION}
    if config_dict.get("engine") is None:
        # Recorded only where there is a choice (the MuJoCo tasks): run directories of the other
        # tasks, written before engines existed, still resume and read back as finished.
        del config_dict["engine"]
    # The aggregation rule likewise only when it is not the mean (trim only for the trimmed mean):
    # run directories written before the rule was a setting hold the mean's runs.
    if config_dict["aggregation"] != "trimmed_mean":
        del config_dict["trim"]
    if config_dict["aggregation"] == "mean":
        del config_dict["aggregation"]
    num_runs = num_seeds
    if grid:
        config_dict["grid"] = {name: list(map(float, values)) for name, values in grid.items()}
        num_runs *= math.prod(len(values) for values in grid.values())
    if run_batch is not None and run_batch < num_runs:
        # Recorded only when it shapes the program: run directories written before this setting
        # existed (every run in one vmap) still resume.
        config_dict["run_batch"] = run_batch
    else:
        run_batch = None
    return config_dict, run_batch


def config_differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Every setting that differs between two recorded configs, by its full name with both values:
    ['agent.omega: 0.1 -> 0.05', 'num_seeds: 1 -> 2']."""
    old, new = as_recorded(old), as_recorded(new)
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, _NOT_SET), new.get(key, _NOT_SET)
        if isinstance(a, dict) and isinstance(b, dict):
            lines += config_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            lines.append(f"{prefix}{key}: {_shown(a)} -> {_shown(b)}")
    return lines


_NOT_SET = object()


def _shown(value) -> str:
    if value is _NOT_SET:
        return "(not set)"
    return value if isinstance(value, str) else json.dumps(value)


# Settings recorded in every run since they were added, with the value a run recorded before then
# used: (section, name) -> value. A record without the field is read as holding that value, so
# older run directories still resume, read back as finished, and compare equal to a new run of the
# same settings.
# A one-name key is a top-level field.
UNRECORDED_BEFORE = {
    ("agent", "init"): "flax",  # network initialisation (agents.base.INIT)
    ("agent_revision",): 1,  # how the agents act and learn, where no setting says (agents.base.REVISION)
}


def as_recorded(value):
    """A config record as JSON values, with the fields older records lack filled in
    (`UNRECORDED_BEFORE`): what it is compared as."""
    value = json.loads(json.dumps(value))
    if isinstance(value, dict):
        for path, before in UNRECORDED_BEFORE.items():
            if len(path) == 1:
                value.setdefault(path[0], before)
            elif isinstance(value.get(path[0]), dict):
                value[path[0]].setdefault(path[1], before)
    return value




def first_seed_field(first_seed: int) -> dict:
    """{"first_seed": n} for a run that starts past seed index 0 (a piece of a wider run), else {}: a
    record without the field started at 0."""
    return {"first_seed": first_seed} if first_seed else {}
