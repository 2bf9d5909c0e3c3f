"""What a run records as its configuration (config.json, finished.json, a checkpoint's extras) and how
two records are compared. `recorded_config` writes every field; `as_recorded` reads a record of any
version in one canonical form (the one place that knows older records): the fields it lacks filled
with the values its run had, and settings that change nothing for it left out, so that a run
directory resumes and reads back across versions."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from fedjax_rl import agents, envs
from fedjax_rl.agents.base import AGENT_REVISION, revision
from fedjax_rl.training import configs

REVISION_NAME = AGENT_REVISION.name  # the agent setting recorded as the run's `agent_revision`


def to_lists(tree: Any) -> Any:
    """Arrays as nested lists: what JSON (metrics.json, the checkpoint's curve) holds."""
    return jax.tree.map(lambda x: np.asarray(x).tolist(), tree)


def curve_rows(result: dict, seed: int = 0) -> list[list]:
    """metrics.csv's rows: a header, then one row per seed and evaluation block of each [seeds, blocks]
    curve record (the per-round records stay in metrics.json). The seed column names each seed as the
    command line does (`--seed 3 --seeds 2`: seeds 3 and 4) and TensorBoard's per-seed runs are named:
    the run's `seed` plus the seed's index in it, which a piece's `seed_indices` start past 0 (a
    federation with seed=3 writes 3, not its index 0)."""
    curve = result["curve"]
    keys = [k for k in sorted(curve) if np.ndim(curve[k]) == 2]
    num_seeds, num_blocks = np.shape(curve[keys[0]]) if keys else (0, 0)
    indices = result.get("seed_indices", range(num_seeds))
    return [["seed", *keys]] + [[seed + indices[s], *(curve[k][s, b] for k in keys)]
                                for s in range(num_seeds) for b in range(num_blocks)]


def final_rows(result: dict, seed: int = 0) -> list[list]:
    """final.csv's rows: a header, then each seed's local average, local minimum and sweep returns, the
    seed named as in `curve_rows`; none for a run without a final evaluation (one that stopped)."""
    final = result["final"]
    if not final:
        return []
    indices = result.get("seed_indices", range(len(final["local_average"])))
    header = ["seed", "local_average", "local_minimum", *[f"sweep_{c:.1f}" for c in final["sweep_scales"][0]]]
    return [header] + [[seed + indices[s], final["local_average"][s], final["local_minimum"][s],
                        *final["sweep_returns"][s]] for s in range(len(final["local_average"]))]


def config_to_dict(config) -> dict:
    """What a run directory records as its configuration: every setting but those that change no
    number (`configs.NOT_IDENTITY`): `cpu_dots`, which only rounds differently (like another CPU;
    the library a run used is in its metrics.json, "cpu_dots"), and `tensorboard`. A run resumes and
    reads back with either value of them. The agent's `revision` is recorded once, as the run's
    `agent_revision` (`recorded_config`), where records of every version keep it."""
    fields = configs.identity_fields(dataclasses.asdict(config))
    fields["agent"] = {k: v for k, v in fields["agent"].items() if k != REVISION_NAME}
    return fields


def config_from_record(recorded: dict):
    """The TrainConfig a run directory's config.json records, resolved as `fedjax-rl train` resolved it
    (the record in its canonical form, `as_recorded`, so a record of any version reads)."""
    recorded = as_recorded(recorded)

    def tuples(value):  # JSON lists back into the tuples the settings hold
        return tuple(tuples(v) for v in value) if isinstance(value, list) else value

    fields = {name: tuples(value) for name, value in recorded.items()
              if name not in ("algo", "env_name", "agent", *RUN_FIELDS)}
    agent = {name: tuples(value) for name, value in recorded["agent"].items()}
    declared = {s.name for s in agents.get(recorded["algo"]).config.SETTINGS}
    if REVISION_NAME in declared:
        agent[REVISION_NAME] = recorded["agent_revision"]
    return configs.train_config(recorded["algo"], recorded["env_name"], agent_overrides=agent, **fields)


def recorded_config(config, num_seeds: int, seed: int, grid: dict[str, Sequence[float]] | None = None,
                    run_batch: int | None = None, first_seed: int = 0,
                    provenance: dict | None = None) -> tuple[dict, int | None]:
    """What a run directory's config.json records (a checkpoint resumes only into the same), and the
    run_batch that shapes the program: None when every run fits in one vmap. `provenance`: where it
    runs and where its physics come from (default `COMPILED`)."""
    config_dict = {**config_to_dict(config), "num_seeds": num_seeds, "seed": seed, "first_seed": first_seed,
                   "agent_revision": revision(config.agent), "schema": RUN_SCHEMA,
                   "provenance": dict(provenance or COMPILED)}
    num_runs = num_seeds
    if grid:
        config_dict["grid"] = {name: list(map(float, values)) for name, values in grid.items()}
        num_runs *= math.prod(len(values) for values in grid.values())
    # A batch of every run is the all-at-once program: the same as none.
    config_dict["run_batch"] = run_batch = run_batch if run_batch is not None and run_batch < num_runs else None
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


def provenance(record: dict) -> dict:
    """A config record's provenance (`COMPILED` for a record without one)."""
    return {**COMPILED, **record.get("provenance", {})}


def same_physics(a: dict, b: dict) -> bool:
    """Whether two provenances (`provenance`) put their agents in the same environments: both drawn (the
    seed's draw, alike), or both set by the nodes with the same values and scales."""
    return all(a.get(key) == b.get(key) for key in ("physics", "agents", "scales"))


def physics_words(record: dict) -> str:
    """Where a run's physics came from, in words: 'drawn (max_rate 0.5)', or 'set by the nodes (agent 0
    length=0.4 (x0.8); agent 1 ...)'."""
    recorded = provenance(record)
    if recorded["physics"] == "drawn":
        return f"drawn (max_rate {record.get('max_rate', '?'):g})" if "max_rate" in record else "drawn"
    agents = []
    for k, (values, scales) in enumerate(zip(recorded.get("agents", []), recorded.get("scales", []))):
        agents.append(f"agent {k} " + ", ".join(
            f"{name}={value:.4g}" + (f" (x{scales[name]:g})" if name in scales else " (drawn)")
            for name, value in values.items()))
    return "set by the nodes (" + "; ".join(agents) + ")"


def _shown(value) -> str:
    if value is _NOT_SET:
        return "(not set)"
    return value if isinstance(value, str) else json.dumps(value)


# What a record holds beyond the run's settings (`recorded_config`): how many seeds from which, how
# runs were batched, the agents' revision, the grid and the record's layout.
RUN_FIELDS = ("num_seeds", "seed", "first_seed", "run_batch", "agent_revision", "grid", "schema", "provenance")
# Where a run's agents ran and where their physics came from (config.json's "provenance"): a compiled
# program (`loop.run`) draws every agent's physics from the seed; a Flower federation (`fedjax_rl.flower`)
# records "flower", and where its nodes set their physics, "set by the nodes" with each agent's values
# and scales. Not part of a run's identity (`as_recorded` leaves it out): `compare` reads it to keep runs
# in other environments apart, and a resumed federation checks its nodes against it. A record without
# one is a compiled run's.
COMPILED = {"runtime": "compiled", "physics": "drawn"}
# The layout of config.json. A record carries its number from 2 on (1: every record before); the
# number is not part of a run's identity.
RUN_SCHEMA = 2
# Fields a record may lack, with the value its run had: (section, name) -> value; a one-name key is
# a top-level field. The engine, which depends on the task, is filled in `as_recorded`.
UNRECORDED_BEFORE = {
    ("agent", "init"): "flax",  # network initialisation (agents.base.INIT)
    ("agent_revision",): 1,  # how the agents act and learn, where no other setting says (agents.base.REVISION)
    ("aggregation",): "mean",  # FedAvg: a record without the setting averaged by the mean
    ("run_batch",): None,  # every run in one vmap
    ("first_seed",): 0,  # a run from seed index 0: a whole program, not a later piece
    ("attackers",): 0,  # no attacks (`core.attacks`)
}


def as_recorded(value):
    """A config record as JSON values in its canonical form, what it is compared as: the fields an
    older record lacks filled in (`UNRECORDED_BEFORE`; the engine: MJX for a MuJoCo task, the only
    one before engines were a setting, none for the others), and what changes nothing for the run
    left out (its schema number; `trim` unless the rule is the trimmed mean, Krum's settings unless it is
    Krum, the attack's unless some agent attacks)."""
    value = json.loads(json.dumps(value))
    if isinstance(value, dict) and "env_name" in value:  # a run's record (not one of its sections)
        for path, before in UNRECORDED_BEFORE.items():
            if len(path) == 1:
                value.setdefault(path[0], before)
            elif isinstance(value.get(path[0]), dict):
                value[path[0]].setdefault(path[1], before)
        value.pop("schema", None)
        value.pop("provenance", None)
        if value["aggregation"] != "trimmed_mean":
            value.pop("trim", None)
        if value["aggregation"] != "krum":  # Krum's settings change nothing for another rule
            value.pop("krum_byzantine", None)
            value.pop("krum_keep", None)
        if value["attackers"] == 0:  # nor an attack's where nobody attacks
            value.pop("attack", None)
            value.pop("attack_scale", None)
        if "engine" not in value:
            value["engine"] = "mjx" if envs.get(value["env_name"]).engines != ("jax",) else None
    return value
