"""Mutation testing of the core (issue 33), run by `make mutation`, never by CI.

Cosmic Ray's operators and engine (`cosmic_ray.mutating.mutate_and_test`: write one mutant to disk,
run a test command in a fresh process, restore) with a selection of our own:

* `TARGETS`: which modules, and which functions of them, are the core, and for each module the
  test files (or test ids) that cover it. Each mutant runs only its module's tests, fastest and
  most discriminating first, with `-x`, so a killed mutant costs one failing test.
* `OPERATORS`: the mutations, one per kind of near miss (+ for -, < for <=, a number off by one,
  a dropped `~`, `&` for `|`, ...), not Cosmic Ray's full cross product of binary operators
  (`x + y` -> `x << y` fails at trace time and teaches nothing).

The mutants are written into a scratch copy of the package and its tests (`MUTATION_DIR`, default
`.mutation/`), never into the working tree. Each module's results are a Cosmic Ray session
(`.mutation/sessions/<module>.sqlite`; `cr-report` reads it); `report` writes the summary to
`tests/mutation/results.json` and prints the survivors with their diffs. Survivors that cannot be
killed (equivalent mutants) are listed in `EQUIVALENT` with the reason; REPORT.md says what
happened to every other one.

    python tests/mutation/campaign.py run [--only losses,federated] [--resume | --survivors]
    python tests/mutation/campaign.py report

`--resume` goes on after a stop (mutants without a result). `--survivors` re-runs only the
non-equivalent mutants that survived the last run (after new tests were added).
Hypothesis runs its `mutation` profile (more examples than CI's) in every test command.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRATCH = Path(os.environ.get("MUTATION_DIR", ROOT / ".mutation")).resolve()
RESULTS = ROOT / "tests" / "mutation" / "results.json"

# One kind of near miss per operator (the names are Cosmic Ray's).
OPERATORS = re.compile(
    r"core/("
    r"ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul|Pow_Mul|FloorDiv_Div|Mod_FloorDiv|BitOr_BitAnd"
    r"|BitAnd_BitOr|BitXor_BitOr)"
    r"|ReplaceComparisonOperator_(Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Eq_NotEq|NotEq_Eq|Is_IsNot|IsNot_Is)"
    r"|ReplaceUnaryOperator_(Delete_USub|Delete_Invert|Delete_Not)"
    r"|ReplaceTrueWithFalse|ReplaceFalseWithTrue|ReplaceAndWithOr|ReplaceOrWithAnd|ReplaceBreakWithContinue"
    r"|AddNot|NumberReplacer|ZeroIterationForLoop"
    r")$"
)


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    module: str
    #: functions (innermost enclosing def, Cosmic Ray's `definition_name`) to mutate; None: all.
    #: "name:regex" keeps only the lines of `name` that match the regex.
    functions: tuple[str, ...] | None
    #: pytest arguments: the tests that cover the module, fastest and most discriminating first
    tests: tuple[str, ...]


_LUNAR_LANDER_RESET_TESTS = (
    "tests/test_lunar_lander.py::test_reset_step_matches_gymnasiums_for_the_same_push",
    "tests/test_lunar_lander.py::test_reset_starts_a_live_episode_with_random_wind_phases",
    "tests/test_lunar_lander.py::test_reset_draws_the_wind_phases_with_gymnasiums_bounds",
    "tests/test_lunar_lander.py::test_spaces_and_reset_observation",
    "tests/test_lunar_lander.py::test_legs_hang_like_gymnasiums_after_reset",
    "tests/test_lunar_lander.py::test_reset_distribution_matches_gymnasium",
    "tests/test_termination.py",
)

TARGETS = (
    Target("losses", "fedjax_rl/core/losses.py", None, (
        "tests/test_losses.py", "tests/test_properties.py",
        "tests/test_dqn.py::test_agent_losses_match_hand_computation",
        "tests/test_ddpg.py::test_critic_target_and_losses_match_hand_computation",
        "tests/test_ddpg.py::test_truncation_bootstraps_and_termination_does_not",
    )),
    Target("federated", "fedjax_rl/core/federated.py", None, (
        "tests/test_federated.py", "tests/test_properties.py", "tests/test_participation.py",
    )),
    # Split out of federated.py (2026-12-05): the rules and the agent axis, with the same tests.
    Target("aggregation", "fedjax_rl/core/aggregation.py", None, (
        "tests/test_federated.py", "tests/test_properties.py", "tests/test_participation.py",
    )),
    Target("agent_axis", "fedjax_rl/core/agent_axis.py", None, (
        "tests/test_federated.py", "tests/test_properties.py", "tests/test_participation.py",
    )),
    Target("heterogeneity", "fedjax_rl/core/perturb.py", None, (
        "tests/test_heterogeneity.py", "tests/test_properties.py",
        "tests/test_envs.py::test_cartpole_agent_params_recompute_derived_fields",
        "tests/test_envs.py::test_zero_rates_reproduce_nominal_exactly",
    )),
    Target("evaluate", "fedjax_rl/core/evaluate.py", None, (
        "tests/test_evaluate.py",
        "tests/test_dqn.py::test_local_minimum_and_average_equal_returns_recomputed_in_each_agents_env",
    )),
    # The finalize code: the global policy, the local-environment metrics and the sweep.
    Target("train", "fedjax_rl/training/program.py",
           ("global_policy", "finalize", "final_record", "block_record", "local_metrics"), (
        "tests/test_evaluate.py::test_local_metrics_on_distinct_returns",
        "tests/test_evaluate.py::test_a_blocks_record_divides_its_totals_by_hand",
        "tests/test_dqn.py::test_local_minimum_and_average_equal_returns_recomputed_in_each_agents_env",
        "tests/test_dqn.py::test_metrics_shapes", "tests/test_golden.py",
        "tests/test_attacks_table.py::test_the_final_record_names_the_attackers_as_the_keys_draw_them",
    )),
    # The learning rule: targets, losses, gradient steps, target-network updates.
    Target("dqn", "fedjax_rl/agents/dqn.py",
           ("next_value", "td_loss", "gradient_step", "learn", "update_target"), (
        "tests/test_dqn.py::test_agent_losses_match_hand_computation", "tests/test_golden.py",
        "tests/test_dqn_invariants.py", "tests/test_dqn.py::test_omega_zero_reproduces_dqnavg_exactly",
    )),
    Target("ddpg", "fedjax_rl/agents/ddpg.py",
           ("next_values", "critic_target", "critic_loss", "actor_loss", "update", "gradient_step", "learn"), (
        "tests/test_ddpg.py::test_critic_target_and_losses_match_hand_computation",
        "tests/test_ddpg.py::test_truncation_bootstraps_and_termination_does_not",
        "tests/test_ddpg.py::test_one_actor_step_increases_q_of_the_policy",
        "tests/test_ddpg.py::test_omega_zero_with_one_critic_is_ddpgavg1_exactly",
        "tests/test_ddpg.py::test_one_trace_per_configuration_and_sync_invariants",
    )),
    # The robust term both agents compose (omega, D(s; psi), its expectile loss and step, the robust
    # target, the *Avg baselines' omega rule): the toy agent's exact numbers first, then each host.
    Target("robust", "fedjax_rl/agents/robust.py",
           ("check_together", "hparams", "init", "degree", "omega", "td_target", "loss", "update"), (
        "tests/test_robust.py",
        "tests/test_dqn.py::test_agent_losses_match_hand_computation",
        "tests/test_ddpg.py::test_critic_target_and_losses_match_hand_computation",
        "tests/test_dqn.py::test_omega_zero_reproduces_dqnavg_exactly",
        "tests/test_ddpg.py::test_omega_zero_with_one_critic_is_ddpgavg1_exactly",
        "tests/test_dqn_invariants.py", "tests/test_golden.py",
    )),
    # Derived physics, reward, goal and the params' defaults. Not the dynamics (acrobot_dsdt,
    # acrobot_rk4: 124 more mutants, which the parity tests of tests/test_envs.py check step by
    # step against gymnasium). CartPole's and MountainCar's step, reward and termination are
    # gymnax's own code (tested at the boundaries in tests/test_termination.py all the same).
    Target("classic_control", "fedjax_rl/envs/classic_control.py",
           ("derive", "step_env", "default_params", "AcrobotParams"), (
        "tests/test_termination.py", "tests/test_envs.py",
    )),
    # The environment contract's shared code: scale checks, identity for jit's caches, and the
    # physics fields every perturbable env reads and writes through.
    Target("env_base", "fedjax_rl/envs/base.py", ("check_scales", "EnvIdentity", "PerturbablePhysics"), (
        "tests/test_heterogeneity.py", "tests/test_envs.py", "tests/test_termination.py",
    )),
    # Reward and termination (not the contact solver).
    Target("lunar_lander", "fedjax_rl/envs/lunar_lander.py",
           ("observation", "shaping", "reward_fn", "step_with_noise", "is_terminated", r"_step:crashed|at_rest"), (
        "tests/test_termination.py",
        "tests/test_lunar_lander.py::test_reward_function_matches_gymnasium_on_its_own_states",
        "tests/test_lunar_lander.py::test_observation_reads_the_landers_own_body_as_gymnasium_does",
        "tests/test_lunar_lander.py::test_spaces_and_reset_observation",
        "tests/test_lunar_lander.py::test_time_limit_truncates_at_1000_steps",
    )),
    # Reset, split with the module (2026-12-05): gymnasium's reset step in closed form and the bodies
    # it starts from (lunar_lander_physics.py), then the terrain, initial push and wind indices
    # (lunar_lander.py's reset_env). One set of tests covers both.
    Target("lunar_lander_reset_step", "fedjax_rl/envs/lunar_lander_physics.py",
           ("initial_bodies", "reset_world_step"), _LUNAR_LANDER_RESET_TESTS),
    Target("lunar_lander_reset_env", "fedjax_rl/envs/lunar_lander.py",
           # not the shapes of the zero-filled solver state (they fail at trace time, uninformatively)
           (r"reset_env:^(?!.*(jnp\.zeros|jnp\.full|time=0))",), _LUNAR_LANDER_RESET_TESTS),
    # The gymnasium bridge's host side: each row's physics, state, step seed and reset, rows that share
    # one state, what a step leaves behind, the time limit. Not its checks before compiling nor the
    # shapes handed to jax.pure_callback (those fail at trace time).
    Target("gymnasium_bridge", "fedjax_rl/envs/gymnasium_bridge.py",
           ("_changed", "_prepare", "_host_reset", "_host_step", "__getattr__", "_fresh_copies"), (
        "tests/test_gymnasium_bridge.py::test_the_host_side_steps_resets_and_broadcasts_rows_by_hand",
        "tests/test_gymnasium_bridge.py::test_a_value_that_is_its_nominal_values_rounding_is_set_to_the_nominal_value",
        "tests/test_gymnasium_bridge.py::test_no_row_sees_mutable_state_another_row_or_step_left_behind",
        "tests/test_gymnasium_bridge.py::test_each_row_draws_from_a_generator_seeded_by_its_own_key",
        "tests/test_gymnasium_bridge.py::test_rows_that_share_one_state_each_step_from_it",
        "tests/test_gymnasium_bridge.py::test_a_perturbed_attribute_steps_as_gymnasium_by_hand",
        "tests/test_gymnasium_bridge.py::test_gym_cartpole_steps_as_the_jax_cartpole",
        "tests/test_gymnasium_bridge.py::test_an_environment_that_raises_stops_the_run_with_its_error_and_keeps_finished_blocks",
    )),
    # The host-callback boundary the bridge and MuJoCo's C engine share: batch shapes, one writable row
    # per simulation, float64 states as uint32 words and back, the nominal rule for float32 parameters.
    Target("host_batch", "fedjax_rl/envs/host_batch.py",
           ("batch_shape", "rows", "float_words", "word_floats", "words_of", "floats_of", "rounded",
            "nominal_where_rounded"), (
        "tests/test_host_batch.py",
        "tests/test_gymnasium_bridge.py::test_the_host_side_steps_resets_and_broadcasts_rows_by_hand",
        "tests/test_gymnasium_bridge.py::test_a_value_that_is_its_nominal_values_rounding_is_set_to_the_nominal_value",
        "tests/test_gymnasium_bridge.py::test_rows_that_share_one_state_each_step_from_it",
        "tests/test_gymnasium_bridge.py::test_gym_cartpole_steps_as_the_jax_cartpole",
    )),
    # A Flower federation's server side in plain Python: a node's physics and attack settings, the
    # screening of non-finite uploads, where a client keeps its carry, the agent index's range. Not the
    # rounds: every test of them trains through Flower, minutes per mutant.
    Target("flower", "fedjax_rl/flower/federation.py",
           ("physics_scales", "node_attack", "nonfinite_leaves", "screened", "carry_path", r"__init__:index"), (
        "tests/test_flower.py::test_a_nodes_settings_and_the_servers_screening_by_hand",
        "tests/test_flower.py::test_bad_federations_stop_before_anything_trains",
        "tests/test_flower.py::test_a_node_the_superlink_reports_unavailable_is_no_client",
    )),
    # `compare`: which runs are judged against which (labels, pairing by seed keys, A - B's order, what
    # makes two runs comparable) and the table of differences.
    Target("compare", "fedjax_rl/analysis/plots.py",
           ("distinguish", "_shown", "_task", "why_not_comparable", "_seeds_paired", "_is_baseline", "_pairs",
            "differences_table"), (
        "tests/test_cli.py::test_compare_pairs_only_runs_that_both_record_their_seed_keys",
        "tests/test_cli.py::test_compare_prints_paired_differences_with_intervals",
        "tests/test_cli.py::test_compare_pairs_seeds_only_where_the_runs_start_at_the_same_seed_index",
        "tests/test_cli.py::test_compare_judges_any_two_runs_and_says_why_it_does_not",
    )),
    # A reproduction request's checks before anything compiles (budget, rows, omegas, levels, the row's
    # record of the request). Not the resolution of programs against the rows on disk (`Plan.at`,
    # `same_revision`: their tests train a row first).
    Target("plan", "fedjax_rl/reproduce/plan.py",
           ("parse_budget", "budget_steps", "select_rows", "check_omegas", "check_max_rates", "request_record",
            "spell_run_batch"), (
        "tests/test_reproduce.py::test_budget_rounds_to_whole_evaluation_blocks",
        "tests/test_reproduce.py::test_a_requests_grids_are_checked_at_their_bounds_and_recorded_only_where_set",
        "tests/test_reproduce.py::test_bad_requests_fail_before_compiling",
        "tests/test_executor.py::test_the_request_is_spelled_as_flags_that_read_back_to_it",
        "tests/test_executor.py::test_a_challengers_own_settings_travel_as_flags_and_are_checked",
        "tests/test_executor.py::test_executor_settings_are_refused_before_anything_runs",
        "tests/test_heterogeneity_table.py::test_levels_are_checked_before_compiling",
        "tests/test_tensorboard.py::test_reproduce_no_tensorboard_reaches_the_runs_and_not_the_rows_record",
    )),
    # A program in pieces of seeds: ranges and their overlaps, grids a piece may hold, which finished pieces
    # cover seeds 0..n and which are still to run. Not reading pieces from disk (`found`, `check`,
    # `location`: their tests train pieces first).
    Target("seed_pieces", "fedjax_rl/reproduce/seed_pieces.py",
           ("overlaps", "num_seeds", "seed_span", "parse_range", "grid_fits", "holds", "covered", "missing"), (
        "tests/test_reproduce.py::test_which_pieces_cover_a_program_and_which_are_left_by_hand",
        "tests/test_reproduce.py::test_pieces_overlap_exactly_where_they_share_a_seed",
    )),
    # Seed plans for the verdict rule: the expected power over the plan's prior and the search for the
    # fewest seeds (the rule's own power, `rule_power`, is an exact formula tested as one).
    Target("power", "fedjax_rl/analysis/power.py",
           ("seeds_for_power", "expected_power", "_plan_prior", "_plan", "sign_power"), (
        "tests/test_stats.py::test_a_seed_plan_is_the_rules_power_over_its_prior_by_hand",
        "tests/test_stats.py::test_a_paired_pilot_plans_from_its_signs_and_a_target_met_exactly_is_reached",
        "tests/test_stats.py::test_seeds_for_power_plans_with_ties_and_says_what_it_delivers",
        "tests/test_stats.py::test_the_rules_power_is_exact",
        "tests/test_stats.py::test_comparison_is_the_tables_reading_of_each_metric",
        "tests/test_stats.py::test_t_test_power_against_the_published_counts",
    )),
)

# Survivors that no test can kill: the mutant computes the same function wherever the code is
# called. Keyed by module, function, and the changed line before and after (stripped, spaces
# removed), so that moved lines keep their entry.
_LAST_AXIS_OF_2D = "axis 1 is axis -1 of the 2-D array it gets"
_CLAMPED = ("the axis has size 1, and JAX clamps an out-of-range static index (documented indexing "
            "semantics), so [..., 1] reads the element [..., 0] reads")
_LEGS_CANCEL = ("only the legs' mass-weighted sum of created positions is read (the position pass keeps "
                "the centre of mass), both legs have one mass (one leg_density), and this x offset is "
                "+-LEG_AWAY for the two legs (LEG_SIGNS), so it cancels whatever its size or sign")
_BEYOND_N = ("the extra pairs reach places i + j + k >= size >= n, and every pair that touches a place >= n "
             "is dropped at the end")
_EITHER_SORT = ("both branches sort the agents' values exactly (the network sorts any number of values; it and "
                "jnp.sort both put NaN last, which the float64 reference test checks at K = 32 and 33): only "
                "the speed differs")
_ANY_NEGATIVE = ("NumPy (2.4, pinned in constraints.txt) reads any negative size in reshape as the one size it "
                 "infers, so -2 is -1")
_EMPTY_GAP = "the gap this adds besides is empty (first == stop), and range(first, stop, size) makes no piece of it"
EQUIVALENT: dict[tuple[str, str, str, str], str] = {
    ("fedjax_rl/core/evaluate.py", "mean_returns_over_params",
     "returnjnp.mean(returns_over_params(env,batched_params,policy,key,num_episodes,max_steps),axis=-1)",
     "returnjnp.mean(returns_over_params(env,batched_params,policy,key,num_episodes,max_steps),axis=1)"):
        _LAST_AXIS_OF_2D + " ([environments, episodes])",
    ("fedjax_rl/core/evaluate.py", "returns_over_params", "num_envs=jax.tree.leaves(batched_params)[0].shape[0]",
     "num_envs=jax.tree.leaves(batched_params)[1].shape[0]"):
        "every leaf of batched env params has the environments' axis first (every env's params have "
        "more than one leaf), so any leaf gives the number of environments",
    ("fedjax_rl/core/losses.py", "expectile_loss", "weight=jnp.where(diff>=0,tau,1.0-tau)",
     "weight=jnp.where(diff>0,tau,1.0-tau)"):
        "the weights differ only where diff == 0, where the loss weight * diff^2 and its derivative "
        "2 weight diff are 0 whichever weight is taken",
    ("fedjax_rl/training/program.py", "local_metrics", "local=jnp.mean(local_episodes,axis=-1)",
     "local=jnp.mean(local_episodes,axis=1)"): _LAST_AXIS_OF_2D + " ([K, episodes], per seed)",
    ("fedjax_rl/training/program.py", "final_record", '"sweep_returns":jnp.mean(sweep_episodes,axis=-1),',
     '"sweep_returns":jnp.mean(sweep_episodes,axis=1),'):
        _LAST_AXIS_OF_2D + " ([sweep points, episodes], per seed: final_record plays the sweep itself)",
    ("fedjax_rl/training/program.py", "finalize", "axis=-1,", "axis=1,"):
        "stacking [K] vectors: axis 1 is the new last axis either way ([K, len(physics)])",
    ("fedjax_rl/training/program.py", "global_policy", "shared=jax.tree.map(lambdaleaf:leaf[0],state.agents.learner.shared)",
     "shared=jax.tree.map(lambdaleaf:leaf[1],state.agents.learner.shared)"):
        "global_policy runs after a federated average, which gives every agent the same shared leaves "
        "(with partial participation too); with K = 1 the index is clamped to 0",
    ("fedjax_rl/envs/classic_control.py", "step_env", "torque=torque+jax.random.uniform(",
     "torque=torque-jax.random.uniform("):
        "subtracting U(-n, n) noise is adding U(-n, n) noise: the same distribution (gymnasium draws "
        "its own numbers, so no test can ask for these particular ones); with the default n = 0 "
        "the same numbers",
    ("fedjax_rl/envs/lunar_lander.py", "observation", "(origin[1]-(HELIPAD_Y+LEG_DOWN/SCALE))/(H/2),",
     "(origin[2]-(HELIPAD_Y+LEG_DOWN/SCALE))/(H/2),"):
        "origin is a 2-vector and JAX clamps the out-of-range static index 2 to 1, the same element",
    ("fedjax_rl/envs/lunar_lander.py", "observation", "state.leg_contact[1].astype(jnp.float32),",
     "state.leg_contact[2].astype(jnp.float32),"):
        "there are two legs and JAX clamps the out-of-range static index 2 to 1, the same element",
    ("fedjax_rl/envs/lunar_lander.py", "shaping", "+10*obs[7]", "+10*obs[8]"):
        "the observation has 8 entries and JAX clamps the out-of-range static index 8 to 7, the same element",
    ("fedjax_rl/envs/lunar_lander_physics.py", "reset_world_step",
     "system_inertia=jnp.sum(inertia+m*jnp.sum(r*r,-1))", "system_inertia=jnp.sum(inertia+m*jnp.sum(r*r,1))"):
        _LAST_AXIS_OF_2D + " (r: [bodies, 2])",
    ("fedjax_rl/envs/lunar_lander_physics.py", "reset_world_step",
     "al=a0+REF_ANGLE+INITIAL_JOINT_ANGLE*jnp.asarray(-LEG_SIGNS)",
     "al=a0+REF_ANGLE+INITIAL_JOINT_ANGLE/jnp.asarray(-LEG_SIGNS)"):
        "LEG_SIGNS is -1 or +1, so dividing by it is multiplying by it",
    ("fedjax_rl/envs/lunar_lander_physics.py", "reset_world_step",
     "lander=jnp.sum(m[:,None]*moved,0)/total-jnp.sum(m[1:,None]*legs_from_lander,0)/total",
     "lander=jnp.sum(m[:,None]*moved,0)/total-jnp.sum(m[2:,None]*legs_from_lander,0)/total"):
        "both legs have the same mass (one leg_density), so broadcasting the second leg's mass over "
        "both gives the same sum",
    ("fedjax_rl/envs/lunar_lander_physics.py", "initial_bodies",
     "al=jnp.asarray(REF_ANGLE+jnp.asarray([joint_angle,-joint_angle]))",
     "al=jnp.asarray(REF_ANGLE-jnp.asarray([joint_angle,-joint_angle]))"):
        "the legs' created angles and positions are never read: the reset step uses the lander's "
        "centre only and sets the legs afresh (initial_bodies has no other caller)",
    ("fedjax_rl/envs/lunar_lander_physics.py", "initial_bodies",
     "al=jnp.asarray(REF_ANGLE+jnp.asarray([joint_angle,-joint_angle]))",
     "al=jnp.asarray(REF_ANGLE+jnp.asarray([joint_angle,joint_angle]))"):
        "the legs' created angles and positions are never read: the reset step uses the lander's "
        "centre only and sets the legs afresh (initial_bodies has no other caller)",
    ("fedjax_rl/envs/lunar_lander.py", "observation", "v[1]*(H/2)/FPS,", "v[2]*(H/2)/FPS,"):
        "v is a 2-vector and JAX clamps the out-of-range static index 2 to 1, the same element",
    ("fedjax_rl/envs/lunar_lander_physics.py", "reset_world_step",
     'created_legs=origin+jnp.stack([-LEG_SIGNS*LEG_AWAY/SCALE,jnp.zeros(2)],-1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))',
     'created_legs=origin-jnp.stack([-LEG_SIGNS*LEG_AWAY/SCALE,jnp.zeros(2)],-1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))'):
        _LEGS_CANCEL,
    ("fedjax_rl/envs/lunar_lander_physics.py", "reset_world_step",
     'created_legs=origin+jnp.stack([-LEG_SIGNS*LEG_AWAY/SCALE,jnp.zeros(2)],-1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))',
     'created_legs=origin+jnp.stack([-LEG_SIGNS/LEG_AWAY/SCALE,jnp.zeros(2)],-1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))'):
        _LEGS_CANCEL,
    ("fedjax_rl/envs/lunar_lander_physics.py", "reset_world_step",
     'created_legs=origin+jnp.stack([-LEG_SIGNS*LEG_AWAY/SCALE,jnp.zeros(2)],-1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))',
     'created_legs=origin+jnp.stack([-LEG_SIGNS*LEG_AWAY*SCALE,jnp.zeros(2)],-1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))'):
        _LEGS_CANCEL,
    ("fedjax_rl/envs/lunar_lander_physics.py", "reset_world_step",
     'created_legs=origin+jnp.stack([-LEG_SIGNS*LEG_AWAY/SCALE,jnp.zeros(2)],-1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))',
     'created_legs=origin+jnp.stack([LEG_SIGNS*LEG_AWAY/SCALE,jnp.zeros(2)],-1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))'):
        _LEGS_CANCEL,
    ("fedjax_rl/envs/lunar_lander_physics.py", "reset_world_step",
     'created_legs=origin+jnp.stack([-LEG_SIGNS*LEG_AWAY/SCALE,jnp.zeros(2)],-1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))',
     'created_legs=origin+jnp.stack([-LEG_SIGNS*LEG_AWAY/SCALE,jnp.zeros(2)],1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))'):
        "stacking two [2] vectors: axis 1 is the new last axis either way",
    ("fedjax_rl/envs/lunar_lander_physics.py", "reset_world_step",
     'created_legs=origin+jnp.stack([-LEG_SIGNS*LEG_AWAY/SCALE,jnp.zeros(2)],-1)+_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))',
     'created_legs=origin+jnp.stack([-LEG_SIGNS*LEG_AWAY/SCALE,jnp.zeros(2)],-1)-_rot(REF_ANGLE,jnp.asarray(_LEG_CENTER,jnp.float32))'):
        "_LEG_CENTER, the centroid of the leg polygon in its own frame, is (0, 0) (the leg is a box about "
        "its origin), so adding or subtracting its rotation adds zero",
    ("fedjax_rl/envs/lunar_lander.py", "reset_env",
     "state,obs,*_=self._step(engine_noise(k_step),state,0,params,force,first=True)",
     "state,obs,*_=self._step(engine_noise(k_step),state,1,params,force,first=True)"):
        "the action enters _step only through the engines' impulses on the velocities, and the reset step "
        "(first=True) discards them: reset_world_step (lunar_lander_physics.py) starts the bodies from rest and computes every "
        "velocity from the push, gravity and wind alone; reset_env keeps only the state and observation",
    ("fedjax_rl/envs/lunar_lander_physics.py", "initial_bodies",
     "returnjnp.concatenate([p0[None],pl]),jnp.concatenate([jnp.zeros(1),al])",
     "returnjnp.concatenate([p0[None],pl]),jnp.concatenate([jnp.zeros(2),al])"):
        "of the created angles only the lander's (index 0, zero either way) is read: the reset step "
        "replaces the whole angle array, one entry per body",
    ("fedjax_rl/core/aggregation.py", "sorting_network", "size=1<<max(0,(n-1).bit_length())", "size=1<<max(0,(n+1).bit_length())"):
        "a larger power of two gives Batcher's network for more places; less the pairs that touch a place "
        ">= n (which would hold +inf and never move) it still sorts any n values, with more comparators",
    ("fedjax_rl/core/aggregation.py", "sorting_network", "forjinrange(k%p,size-k,2*k):", "forjinrange(k%p,size+k,2*k):"):
        "every j past size - k meets an empty inner range (min(k, size - j - k) <= 0), so no pair is added",
    ("fedjax_rl/core/aggregation.py", "sorting_network", "foriinrange(min(k,size-j-k)):", "foriinrange(min(k,size+j-k)):"):
        _BEYOND_N,
    ("fedjax_rl/core/aggregation.py", "sorting_network", "foriinrange(min(k,size-j-k)):", "foriinrange(min(k,size-j+k)):"):
        _BEYOND_N,
    ("fedjax_rl/core/aggregation.py", "_sort_over_agents", "ifvalues.shape[0]>_NETWORK_MAX_AGENTS:", "ifvalues.shape[0]>=_NETWORK_MAX_AGENTS:"):
        _EITHER_SORT,
    ("fedjax_rl/core/aggregation.py", "_sort_over_agents", "ifvalues.shape[0]>_NETWORK_MAX_AGENTS:", "ifnotvalues.shape[0]>_NETWORK_MAX_AGENTS:"):
        _EITHER_SORT,
    ("fedjax_rl/core/aggregation.py", None, "_NETWORK_MAX_AGENTS=32#uptohereasortingnetwork;beyond,itssizeoutgrowsXLA'ssort",
     "_NETWORK_MAX_AGENTS=33#uptohereasortingnetwork;beyond,itssizeoutgrowsXLA'ssort"): _EITHER_SORT,
    ("fedjax_rl/core/aggregation.py", "sorting_network", "size=1<<max(0,(n-1).bit_length())", "size=1<<max(1,(n-1).bit_length())"):
        "it changes only n = 1, whose one extra pair (0, 1) touches place 1 >= n and is dropped",
    ("fedjax_rl/core/aggregation.py", "federated_trimmed_mean",
     "dropped=jnp.asarray([trimmed_count(trim,m)forminrange(num_agents+1)],jnp.int32)",
     "dropped=jnp.asarray([trimmed_count(trim,m)forminrange(num_agents+2)],jnp.int32)"):
        "one more entry in the lookup table, for num_agents + 1 participants, a count that cannot occur",
    ("fedjax_rl/agents/dqn.py", "next_value",
     "returnjnp.max(self.q_values(shared.q_target,batch.next_obs),axis=-1)",
     "returnjnp.max(self.q_values(shared.q_target,batch.next_obs),axis=1)"):
        _LAST_AXIS_OF_2D + ": next_value only ever sees a sampled batch, Q values [batch, actions]",
    ("fedjax_rl/agents/dqn.py", "td_loss",
     "q_taken=jnp.take_along_axis(q_all,batch.action[...,None],axis=-1)[...,0]",
     "q_taken=jnp.take_along_axis(q_all,batch.action[...,None],axis=1)[...,0]"):
        _LAST_AXIS_OF_2D + ": td_loss only ever sees a sampled batch, Q values [batch, actions]",
    ("fedjax_rl/agents/dqn.py", "td_loss",
     "q_taken=jnp.take_along_axis(q_all,batch.action[...,None],axis=-1)[...,0]",
     "q_taken=jnp.take_along_axis(q_all,batch.action[...,None],axis=-1)[...,1]"): _CLAMPED,
    ("fedjax_rl/agents/robust.py", "degree", "returnself.net.apply(degree_params,obs)[...,0]",
     "returnself.net.apply(degree_params,obs)[...,1]"): _CLAMPED,
    ("fedjax_rl/agents/ddpg.py", "actor_loss", "first_critic=jax.tree.map(lambdax:x[:1],critic_params)",
     "first_critic=jax.tree.map(lambdax:x[:2],critic_params)"):
        "the next line takes critic [0] of the sliced stack, so slicing more critics only evaluates "
        "critics whose values are dropped (value and gradient unchanged)",
    ("fedjax_rl/agents/ddpg.py", "actor_loss",
     "returnlosses.actor_loss(self.critics(first_critic,obs,self.actor(actor_params,obs))[0])",
     "returnlosses.actor_loss(self.critics(first_critic,obs,self.actor(actor_params,obs))[1])"): _CLAMPED,
    ("fedjax_rl/analysis/plots.py", "distinguish",
     "forsamein(groupforgroupinby_label.values()iflen(group)>1):",
     "forsamein(groupforgroupinby_label.values()iflen(group)>=1):"):
        "a label no other run shares has no setting that differs among its runs (one run), so nothing is added to it",
    ("fedjax_rl/envs/gymnasium_bridge.py", "_host_reset", "states[i]=self.host_state.get(env).reshape(-1)",
     "states[i]=self.host_state.get(env).reshape(-2)"): _ANY_NEGATIVE,
    ("fedjax_rl/envs/gymnasium_bridge.py", "_host_step", "states[i]=self.host_state.get(env).reshape(-1)",
     "states[i]=self.host_state.get(env).reshape(-2)"): _ANY_NEGATIVE,
    ("fedjax_rl/envs/host_batch.py", "float_words",
     "returnnp.ascontiguousarray(x).view(np.uint32).reshape(lead+(-1,))",
     "returnnp.ascontiguousarray(x).view(np.uint32).reshape(lead+(-2,))"): _ANY_NEGATIVE,
    ("fedjax_rl/reproduce/seed_pieces.py", "missing", "iffirst>at:", "iffirst>=at:"): _EMPTY_GAP,
    ("fedjax_rl/reproduce/seed_pieces.py", "missing", "ifat<self.total:", "ifat<=self.total:"): _EMPTY_GAP,
    ("fedjax_rl/core/aggregation.py", "federated_krum",
     "out=[jnp.mean(r[chosen],axis=0)ifkeep>1elser[chosen[0]]forrinrows]",
     "out=[jnp.mean(r[chosen],axis=0)ifkeep>=1elser[chosen[0]]forrinrows]"):
        "it changes only keep = 1, where the mean over the one chosen row is that row exactly (x / 1), and the "
        "result is cast back to the leaf's dtype either way",
    ("fedjax_rl/core/aggregation.py", "federated_krum",
     "score=jnp.sum(jnp.where(jnp.arange(K)[None,:]<closest,nearest,0.0),axis=1)",
     "score=jnp.sum(jnp.where(jnp.arange(K)[None,:]<closest,nearest,1.0),axis=1)"):
        "it adds the same K - closest to every upload's score (an unusable upload's stays infinite), which keeps "
        "their order; only float32 rounding of two scores within an ulp could tell the difference",
    ("fedjax_rl/core/aggregation.py", "federated_krum",
     "out=[jnp.mean(r[chosen],axis=0)ifkeep>1elser[chosen[0]]forrinrows]",
     "out=[jnp.mean(r[chosen],axis=0)ifkeep>1elser[chosen[1]]forrinrows]"):
        "at keep = 1 `chosen` has one entry, and JAX clamps the out-of-range index 1 to it",
    ("fedjax_rl/core/aggregation.py", None, "@dataclasses.dataclass(frozen=True)", "@dataclasses.dataclass(frozen=False)"):
        "nothing assigns to an Aggregator; frozen only refuses an assignment that never happens",
    ("fedjax_rl/analysis/power.py", "expected_power",
     "(major+minor)*np.log(1-tie)+(ties*np.log(tie)ifties>0else0.0))[:,None]",
     "(major+minor)*np.log(1-tie)+(ties*np.log(tie)ifties>0else1.0))[:,None]"):
        "a pilot without ties adds this one constant to every log weight of the grid, and the weights are "
        "normalised (exp(log_weight - max), then divided by their sum): the constant cancels",
    ("fedjax_rl/analysis/power.py", "_plan", "low,high=MIN_SEEDS-1,MIN_SEEDS", "low,high=MIN_SEEDS+1,MIN_SEEDS"):
        "low's first value is read only when the doubling loop never runs (MIN_SEEDS reaches the target), and "
        "then high - low is -1 instead of 1: neither is > 1, so the bisection is skipped and MIN_SEEDS returned "
        "either way; once the loop runs it overwrites low",
    ("fedjax_rl/reproduce/seed_pieces.py", "missing", "size=piece_seedsormax(self.total,1)",
     "size=piece_seedsormax(self.total,2)"):
        "the size differs only for a total of 0 (no gap) or 1 (the one gap [0, 1), one piece at any size >= 1)",
}


def _annotation_spans(module: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) of every type annotation in `module`. Every core module has `from __future__
    import annotations`: annotations are strings never evaluated, so mutating `float | jax.Array`
    changes nothing; such mutants are not made."""
    import parso

    spans, stack = [], [parso.parse(Path(module).read_text())]
    while stack:
        node = stack.pop()
        stack.extend(getattr(node, "children", ()))
        if node.type in ("param", "funcdef") and node.annotation is not None:
            spans.append((node.annotation.start_pos, node.annotation.end_pos))
        elif node.type == "annassign":
            spans.append((node.children[1].start_pos, node.children[1].end_pos))
    return spans


def _in_annotation(mutation, spans) -> bool:
    return any(start <= tuple(mutation.start_pos) and tuple(mutation.end_pos) <= end for start, end in spans)


def _select(target: Target, mutation, lines: list[str]) -> bool:
    if not OPERATORS.match(mutation.operator_name):
        return False
    if target.functions is None:
        return True
    line = lines[mutation.start_pos[0] - 1]
    for selector in target.functions:
        name, _, pattern = selector.partition(":")
        if mutation.definition_name == name and (not pattern or re.search(pattern, line)):
            return True
    return False


def _mutations(target: Target):
    """Cosmic Ray's enumeration (as `cosmic-ray init`: every position of every operator, numbered
    per operator in traversal order, which is how the engine finds the occurrence again), kept to
    the selected operators and functions."""
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.ast.ast_query import ASTQuery
    from cosmic_ray.work_item import MutationSpec

    module_ast = get_ast_from_path(Path(target.module))
    lines = Path(target.module).read_text().splitlines()
    annotations = _annotation_spans(target.module)
    for operator_name in cosmic_ray.plugins.operator_names():
        if not OPERATORS.match(operator_name):
            continue
        operator = cosmic_ray.plugins.get_operator(operator_name)()
        positions = ((node, index, start, end) for node in ast_nodes(module_ast)
                     for index, (start, end) in enumerate(operator.mutation_positions(node)))
        for occurrence, (node, index, start, end) in enumerate(positions):
            if operator_name == "core/NumberReplacer" and index > 0:
                continue  # one near miss per number, n + 1 (Cosmic Ray also makes n - 1)
            mutation = MutationSpec(module_path=target.module, operator_name=operator_name, occurrence=occurrence,
                                    start_pos=start, end_pos=end,
                                    definition_name=ASTQuery(node).get_definition_name())
            if _select(target, mutation, lines) and not _in_annotation(mutation, annotations):
                yield mutation


def _test_command(target: Target) -> str:
    return " ".join([sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider",
                     "--no-header", "-W", "ignore", *target.tests])


def _prepare_scratch() -> None:
    """A fresh copy of the package and the tests (the mutants are written there)."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "mutation")
    for name in ("fedjax_rl", "tests", "examples", "benchmarks"):  # tests load examples and benchmarks' code
        shutil.rmtree(SCRATCH / name, ignore_errors=True)
        shutil.copytree(ROOT / name, SCRATCH / name, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", SCRATCH / "pyproject.toml")


def _environment() -> None:
    os.environ["PYTHONPATH"] = str(SCRATCH)
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutant must never be read back from a stale .pyc
    os.environ.setdefault("HYPOTHESIS_PROFILE", "mutation")


def _session(target: Target) -> Path:
    return SCRATCH / "sessions" / f"{target.name}.sqlite"


def _baseline(target: Target) -> float | None:
    start = time.monotonic()
    proc = subprocess.run(_test_command(target).split(), capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        print(f"{target.name}: skipped, its covering tests fail on the unmutated code:\n{proc.stdout[-3000:]}")
        return None
    return seconds


def run(names: list[str] | None, survivors_only: bool, resume: bool = False, check_baseline: bool = True) -> None:
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkItem

    _prepare_scratch()
    _environment()
    os.chdir(SCRATCH)
    (SCRATCH / "sessions").mkdir(exist_ok=True)
    for target in TARGETS:
        if names and target.name not in names:
            continue
        baseline = _baseline(target) if check_baseline else 200.0
        if baseline is None:
            continue
        # A mutant that runs far past the clean run (an endless while_loop) counts as killed.
        timeout = max(3 * baseline, baseline + 120)
        command = _test_command(target)
        with use_db(str(_session(target)), WorkDB.Mode.create) as db:
            if resume and db.num_work_items:
                todo = list(db.pending_work_items)
            elif survivors_only:
                annotations = _annotation_spans(target.module)
                todo = [item for item, result in db.completed_work_items if result.test_outcome == TestOutcome.SURVIVED
                        and not _equivalent_reason(item.mutations[0], result.diff)
                        and not _in_annotation(item.mutations[0], annotations)]
            else:
                db.clear()
                todo = [WorkItem.single(job_id=f"{target.name}-{i:04d}", mutation=m)
                        for i, m in enumerate(_mutations(target))]
                db.add_work_items(todo)
            print(f"{target.name}: {len(todo)} mutants, clean tests {baseline:.0f} s, timeout {timeout:.0f} s",
                  flush=True)
            for i, item in enumerate(todo, 1):
                start = time.monotonic()
                result = mutate_and_test(item.mutations, command, timeout)
                db.set_result(item.job_id, result)
                spec = item.mutations[0]
                print(f"  [{i}/{len(todo)}] {result.test_outcome or result.worker_outcome:9s} "
                      f"{time.monotonic() - start:5.0f} s  {spec.definition_name}:{spec.start_pos[0]} "
                      f"{spec.operator_name}", flush=True)
    report()


def _changed_lines(diff: str) -> tuple[str, str]:
    """The removed and the added line of a one-line mutation diff, without spaces."""
    removed = [line[1:] for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return "".join(removed).replace(" ", ""), "".join(added).replace(" ", "")


def _equivalent_reason(spec, diff: str) -> str | None:
    return EQUIVALENT.get((str(spec.module_path), spec.definition_name, *_changed_lines(diff or "")))


def _table_line(name: str, counts: dict) -> str:
    # A module whose every mutant is equivalent has no score, but it did run.
    score = "no non-equivalent mutant" if counts["score"] is None else f"{100 * counts['score']:.1f}%"
    return (f"| {name} | {counts['mutants']} | {counts['killed']} ({counts['timeouts']}) | "
            f"{counts['survived']} | {counts['equivalent']} | {counts['incompetent']} | {score} |"
            if counts["run"] else f"| {name} | not run |")


def report() -> None:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome

    # A module run in an earlier session whose database is not here (another machine, a fresh clone)
    # keeps the results that session recorded; `run` on it replaces them.
    earlier = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    summary, lines = {}, []
    for target in TARGETS:
        path = _session(target)
        if not path.exists():
            if target.name in earlier:
                summary[target.name] = counts = {**earlier[target.name], "module": target.module}
                lines.append(_table_line(target.name, counts))
            continue
        with use_db(str(path), WorkDB.Mode.open) as db:
            done = db.completed_work_items
            total = db.num_work_items
        # Sessions made before annotations were left out may hold their mutants: not counted.
        annotations = _annotation_spans(str(SCRATCH / target.module))
        done = [(item, result) for item, result in done if not _in_annotation(item.mutations[0], annotations)]
        with use_db(str(path), WorkDB.Mode.open) as db:
            total = sum(not _in_annotation(item.mutations[0], annotations) for item in db.work_items)
        counts = dict(mutants=total, run=len(done), killed=0, timeouts=0, survived=0, equivalent=0, incompetent=0)
        survivors = []
        for item, result in done:
            spec = item.mutations[0]
            if result.test_outcome == TestOutcome.KILLED:
                counts["killed"] += 1
                counts["timeouts"] += result.output == "timeout"
            elif result.test_outcome == TestOutcome.SURVIVED:
                reason = _equivalent_reason(spec, result.diff)
                counts["equivalent" if reason else "survived"] += 1
                survivors.append(dict(job=item.job_id, function=spec.definition_name, line=spec.start_pos[0],
                                      operator=spec.operator_name, equivalent=reason, diff=result.diff))
            else:
                counts["incompetent"] += 1
        non_equivalent = counts["run"] - counts["equivalent"] - counts["incompetent"]
        counts["score"] = round(counts["killed"] / non_equivalent, 4) if non_equivalent else None
        summary[target.name] = dict(module=target.module, **counts,
                                    survivors=sorted(survivors, key=lambda s: s["line"]))
        lines.append(_table_line(target.name, counts))
    killed = sum(s["killed"] for s in summary.values())
    non_equivalent = sum(s["run"] - s["equivalent"] - s["incompetent"] for s in summary.values())
    summary["total"] = dict(killed=killed, non_equivalent=non_equivalent,
                            score=round(killed / non_equivalent, 4) if non_equivalent else None)
    RESULTS.write_text(json.dumps(summary, indent=1) + "\n")
    print("| module | mutants | killed (by timeout) | survived | equivalent | incompetent | killed of non-equivalent |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(lines))
    print(f"total: {killed} of {non_equivalent} non-equivalent mutants killed ({summary['total']['score']})")
    for target, s in summary.items():
        for survivor in s.get("survivors", []):
            if not survivor["equivalent"]:
                print(f"\n-- survived: {target} {survivor['function']}:{survivor['line']} {survivor['operator']}\n"
                      f"{survivor['diff']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="mutate and test (all modules, or --only some)")
    run_parser.add_argument("--only", help=f"comma-separated, of: {', '.join(t.name for t in TARGETS)}")
    run_parser.add_argument("--survivors", action="store_true", help="re-run only the last run's survivors")
    run_parser.add_argument("--resume", action="store_true", help="run only the mutants not yet run (after a stop)")
    run_parser.add_argument("--no-baseline", action="store_true",
                            help="skip the clean run of each module's tests (when just run by hand); timeout 600 s")
    sub.add_parser("report", help="summarise the sessions into tests/mutation/results.json")
    sub.add_parser("list", help="count the mutants of each module without running anything")
    args = parser.parse_args()
    if args.command == "run":
        names = args.only.split(",") if args.only else None
        unknown = set(names or ()) - {t.name for t in TARGETS}
        if unknown:
            parser.error(f"unknown module(s) {sorted(unknown)}; allowed: {', '.join(t.name for t in TARGETS)}")
        run(names, args.survivors, args.resume, not args.no_baseline)
    elif args.command == "report":
        report()
    else:
        os.chdir(ROOT)
        for target in TARGETS:
            # A function that moved or was renamed would silently leave its code unmutated.
            defined = {node.name for node in ast.walk(ast.parse(Path(target.module).read_text()))
                       if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            missing = [f for f in target.functions or () if f.partition(":")[0] not in defined]
            if missing:
                raise SystemExit(f"{target.name}: {', '.join(missing)} not defined in {target.module}")
            print(f"{target.name:24s} {sum(1 for _ in _mutations(target)):4d}")


if __name__ == "__main__":
    main()
