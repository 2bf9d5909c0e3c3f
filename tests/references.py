"""Independent references the tests compare the library with (imported by test modules)."""

import numpy as np


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
