"""Independent references the tests compare the library with (imported by test modules)."""

import json
import os

import jax
import numpy as np


def users_codegen(compiler_options=None) -> dict:
    """`compiler_options` that compile a program as users' runs compile it (XLA's defaults), where the
    suite compiles its programs with its own, faster-compiling settings (tests/conftest.py). For tests
    whose claim rests on code generation: two different programs that agree bit for bit."""
    return {**(compiler_options or {}), **json.loads(os.environ.get("FEDJAX_RL_TESTS_USERS_CODEGEN", "{}"))}


def numpy_mlp(params, x):
    """float64 numpy forward pass of a flax MLP (Dense_0 ... Dense_n, relu between)."""
    layers = params["params"]
    names = sorted(layers, key=lambda name: int(name.split("_")[1]))
    x = np.asarray(x, np.float64)
    for i, name in enumerate(names):
        x = x @ np.asarray(layers[name]["kernel"], np.float64) + np.asarray(layers[name]["bias"], np.float64)
        if i < len(names) - 1:
            x = np.maximum(x, 0.0)
    return x


def max_dot_batch_dims(jaxpr) -> int:
    """The most batch dimensions of any dot_general in `jaxpr`, its sub-jaxprs included."""
    most = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            most = max(most, len(eqn.params["dimension_numbers"][1][0]))
        for sub in jax.core.jaxprs_in_params(eqn.params):
            most = max(most, max_dot_batch_dims(sub))
    return most


def tensorboard_scalars(directory: str) -> dict:
    """{tag: [(step, value)]} of the event files in `directory` as TensorBoard shows them: its own event
    accumulator, which honours a writer's restart (purge_step) as the dashboard does."""
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(directory)
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def tensorboard_raw_steps(directory: str, tag: str) -> list:
    """The step of every record of `tag` in the directory's event files, in file order: TensorBoard's
    file loader, which hides nothing (a point written twice appears twice)."""
    import glob
    import os

    from tensorboard.backend.event_processing import event_file_loader

    steps = []
    for path in sorted(glob.glob(os.path.join(glob.escape(directory), "events.out.tfevents.*"))):
        for event in event_file_loader.EventFileLoader(path).Load():
            steps += [event.step for value in event.summary.value if value.tag == tag]
    return steps
