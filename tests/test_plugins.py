"""Extending fedjax_rl from outside: entry points listed without imports, algorithms and aggregation
rules registered through one path, a failing or clashing plugin named and contained, and the worked
example (examples/own_algorithm) installed with pip and trained from the command line."""

import dataclasses
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_rl import agents, envs, plugins
from fedjax_rl.agents import dqn, robust
from fedjax_rl.agents.base import Transition
from fedjax_rl.cli import commands
from fedjax_rl.core import agent_axis, aggregation, federated
from fedjax_rl.training import configs

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "own_algorithm")


def _fake_distribution(root, name: str, entry_points: str, modules: dict[str, str] | None = None):
    """A distribution as pip --target lays it out: NAME-0.1.dist-info/entry_points.txt and its modules."""
    info = root / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    for module, source in (modules or {}).items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    return root


def test_installed_lists_what_importlib_metadata_lists_without_importing(tmp_path, monkeypatch):
    # Parity with the standard library's reading, on every group of this environment...
    for group in ("console_scripts", plugins.ALGORITHM_GROUP):
        expected = {ep.name for ep in importlib.metadata.entry_points(group=group)}
        assert set(plugins.installed(group)) == expected, group
    # ... and on a distribution added to the path, whose module would fail if it were imported.
    _fake_distribution(tmp_path, "broken_plugin", """
        [fedjax_rl.algorithms]
        broken = broken_plugin:ALGORITHM
        [fedjax_rl.aggregators]
        loud = broken_plugin:RULE
        """, {"broken_plugin": "raise ImportError('missing dependency: not_a_package')"})
    monkeypatch.syspath_prepend(str(tmp_path))
    found = plugins.installed(plugins.ALGORITHM_GROUP)
    assert found["broken"] == plugins.EntryPoint(plugins.ALGORITHM_GROUP, "broken", "broken_plugin:ALGORITHM",
                                                 "broken_plugin-0.1")
    assert {ep.name for ep in importlib.metadata.entry_points(group=plugins.ALGORITHM_GROUP)} == set(found)
    assert "broken_plugin" not in sys.modules
    # An aggregation rule's plugin is found and named the same way, through the same registry.
    assert aggregation.AGGREGATORS.known("loud") and "loud" in aggregation.AGGREGATORS.names()
    with pytest.raises(plugins.PluginError, match=r"plugin 'loud' of fedjax_rl.aggregators \(broken_plugin:RULE"):
        aggregation.AGGREGATORS.get("loud")
    # `train --help` names the installed rule after --aggregation, read from metadata alone.
    help_text = subprocess.run([sys.executable, "-m", "fedjax_rl.cli", "train", "--help"], capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": str(tmp_path)}, check=True).stdout
    assert "Installed plugin rules: loud." in " ".join(help_text.split())


def test_a_plugin_that_fails_to_import_is_named_and_breaks_nothing_else(tmp_path, monkeypatch, capsys):
    _fake_distribution(tmp_path, "broken_plugin", """
        [fedjax_rl.algorithms]
        broken = broken_plugin:ALGORITHM
        """, {"broken_plugin": "raise ImportError('missing dependency: not_a_package')"})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "broken" in agents.names() and agents.known("broken")
    with pytest.raises(plugins.PluginError, match=r"plugin 'broken' of fedjax_rl.algorithms \(broken_plugin:ALGORITHM, "
                                                  r"from broken_plugin-0.1\) failed to load: ImportError: missing"):
        agents.get("broken")
    # Where it failed: the plugin's file and line, and how to see the whole traceback.
    where = re.escape(str(tmp_path / "broken_plugin.py"))
    with pytest.raises(plugins.PluginError, match=rf"\(at {where}:1; FEDJAX_RL_TRACEBACK=1 shows the traceback\)$"):
        agents.get("broken")
    monkeypatch.setenv(plugins.TRACEBACK_ENV, "1")
    with pytest.raises(plugins.PluginError, match=r"Traceback \(most recent call last\):(.|\n)*ImportError: missing"):
        agents.get("broken")
    monkeypatch.delenv(plugins.TRACEBACK_ENV)
    assert agents.get("fedrdqn").label == "FedRDQN"  # the built-ins are untouched
    with pytest.raises(SystemExit, match="failed to load: ImportError"):  # named before anything compiles
        commands.main(["train", "--algo", "broken", "--steps", "1000"])
    with pytest.raises(SystemExit) as help_exit:  # --help lists it without importing it
        commands.main(["train", "--help"])
    shown = capsys.readouterr().out
    assert help_exit.value.code == 0 and "--algo {broken,ddpgavg1," in shown
    assert "Plugin algorithms (broken) declare settings of their own: `fedjax-rl plugins` lists them." in " ".join(
        shown.split())
    with pytest.raises(SystemExit, match=r"1 plugin\(s\) failed"):
        commands.main(["plugins"])
    assert "broken = broken_plugin:ALGORITHM (broken_plugin-0.1): plugin 'broken'" in capsys.readouterr().out


def test_a_plugin_with_a_taken_or_mismatched_name_is_named_and_not_used(tmp_path, monkeypatch):
    _fake_distribution(tmp_path, "clash", """
        [fedjax_rl.algorithms]
        fedrdqn = clash:ALGORITHM
        other_name = clash:ALGORITHM
        """, {"clash": """
        import dataclasses
        from fedjax_rl import agents
        ALGORITHM = dataclasses.replace(agents.get("fedrdqn"), label="not FedRDQN")
        """})
    monkeypatch.syspath_prepend(str(tmp_path))
    # Wherever the taken name is used (here by the plugin's own module, importing FedRDQN), the plugin
    # that claims it is said not to be used, once.
    with pytest.warns(UserWarning, match=r"plugin 'fedrdqn' of fedjax_rl.algorithms \(clash:ALGORITHM, from clash-0.1\) "
                                         r"is not used: the algorithm name 'fedrdqn' is already taken \(by fedjax_rl\)"):
        report = agents.load_plugins()
    assert report["fedrdqn"].startswith("plugin 'fedrdqn' of fedjax_rl.algorithms (clash:ALGORITHM, from clash-0.1): "
                                        "the algorithm name 'fedrdqn' is already taken (by fedjax_rl)")
    assert "names the algorithm 'fedrdqn': an entry point's name and its algorithm's must be the same" in report["other_name"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert agents.get("fedrdqn").label == "FedRDQN"


def test_register_refuses_what_cannot_serve():
    fedrdqn = agents.get("fedrdqn")
    with pytest.raises(ValueError, match=r"my code: the algorithm name 'fedrdqn' is already taken \(by fedjax_rl\)"):
        agents.register(dataclasses.replace(fedrdqn, label="mine"), "my code")
    with pytest.raises(ValueError, match=r"a algorithm name is lower_snake_case .*got 'Fed-X'"):
        agents.register(dataclasses.replace(fedrdqn, name="Fed-X"))
    with pytest.raises(ValueError, match=r"its agent class object lacks init, act, .* of the agent protocol"):
        agents.register(dataclasses.replace(fedrdqn, name="hollow", agent=object))
    with pytest.raises(ValueError, match=r"a algorithm is a fedjax_rl.agents.registry.Algorithm, got dict"):
        agents.register({"name": "x"})
    assert "hollow" not in agents.ALGORITHMS and agents.register(fedrdqn) is fedrdqn  # the same object again: fine


def test_a_registered_aggregation_rule_is_a_setting_value_and_runs_under_the_agent_axis():
    def coordinate_max(tree, weight=None):  # a user's rule: every agent gets the largest upload
        return jax.tree.map(lambda x: jax.lax.pmax(x, agent_axis.agent_axes()), tree)

    aggregation.AGGREGATORS.register(aggregation.Aggregator("coordinate_max", lambda server: coordinate_max))
    try:
        config = configs.train_config("fedrdqn", "CartPole-v1", aggregation="coordinate_max")
        config.validate()
        server = federated.Server(4, aggregation=config.aggregation)
        out = jax.jit(agent_axis.for_each_agent(server.rule, 4))(jnp.arange(8.0).reshape(4, 2))
        np.testing.assert_array_equal(out, [[6.0, 7.0]] * 4)
        assert not server.robust
    finally:
        del aggregation.AGGREGATORS.entries["coordinate_max"], aggregation.AGGREGATORS.origins["coordinate_max"]
    with pytest.raises(ValueError, match=r"aggregation must be one of \['krum', 'mean', 'median', 'trimmed_mean'\], got 'coordinate_max'"):
        # (another config than the one validated above: a valid config's check is cached)
        configs.train_config("fedrdqn", "CartPole-v1", aggregation="coordinate_max", sync_every=7).validate()


@pytest.fixture(scope="module")
def example_module():
    sys.path.insert(0, EXAMPLE)
    try:
        import fedrdqn_min

        yield fedrdqn_min
    finally:
        sys.path.remove(EXAMPLE)


def test_the_examples_target_by_hand(example_module):
    """C = kappa min(V', D) + (1 - kappa) D with V' = 0 on termination, in the robust target; kappa = 0
    is FedRDQN's target exactly."""
    config = example_module.MinDQNConfig(hidden_sizes=(4,))
    term, fedrdqn_term = example_module.MinRobustTerm(config, None), robust.RobustTerm(config, None)
    batch = Transition(obs=jnp.zeros((3, 2)), action=jnp.zeros(3, jnp.int32), reward=jnp.array([1.0, 1.0, 0.5]),
                       next_obs=jnp.zeros((3, 2)), terminated=jnp.array([False, False, True]))
    shared = dqn.DQNShared(q=None, q_target=None, degree=term.net.init(jax.random.key(1), jnp.zeros(2)))
    degree = float(term.degree(shared.degree, batch.obs)[0])  # the same D for the three equal observations
    next_value = jnp.array([degree + 2.0, degree - 2.0, 5.0])
    hp = config.hparams().replace(omega=0.5, gamma=0.9)
    mine = term.td_target(shared, batch, next_value, hp.replace(pessimism=1.0))
    # V' above D: C = D; V' below D: C = V'; terminated: V' = 0, C = min(0, D).
    expected = [1.0 + 0.9 * 0.5 * (degree + 2.0) + 0.9 * 0.5 * degree,
                1.0 + 0.9 * 0.5 * (degree - 2.0) + 0.9 * 0.5 * (degree - 2.0),
                0.5 + 0.9 * 0.5 * min(0.0, degree)]
    np.testing.assert_allclose(mine, expected, rtol=1e-6)
    np.testing.assert_array_equal(term.td_target(shared, batch, next_value, hp.replace(pessimism=0.0)),
                                  fedrdqn_term.td_target(shared, batch, next_value, hp))


@pytest.mark.deployment
def test_the_example_installs_with_pip_and_trains_from_the_command_line(tmp_path):
    """The issue's path: pip install --no-deps --target DIR, PYTHONPATH=DIR, then `fedjax-rl train
    --algo fedrdqn_min`; its setting is validated like a built-in one, before anything compiles.
    (--no-build-isolation: the suite does not reach a package index; the venv's setuptools builds it.)"""
    source, target = tmp_path / "src", tmp_path / "site"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True, text=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    cli = [sys.executable, "-c", "from fedjax_rl.cli import commands; commands.main()"]
    refused = subprocess.run([*cli, "train", "--algo", "fedrdqn_min", "--set", "pessimism=1.5", "--steps", "2000"],
                             env=env, capture_output=True, text=True, cwd=tmp_path)
    assert refused.returncode != 0 and "pessimism must be in [0, 1], got 1.5" in refused.stderr
    assert "compiling" not in refused.stdout
    run = tmp_path / "run"
    done = subprocess.run([*cli, "train", "--algo", "fedrdqn_min", "--env", "CartPole-v1", "--steps", "2000",
                           "--seeds", "1", "--out", str(run), "--no-progress"],
                          env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["algo"] == "fedrdqn_min" and recorded["agent"]["pessimism"] == 1.0
    assert (run / "finished.json").exists() and (run / "metrics.json").exists()

    # "Is my idea better than FedRDQN?": the plugin's runs against FedRDQN's, on the same seed keys, are
    # paired and judged by the tables' rule. 8 seeds, the plugin higher on 8 of 8 by 1: the sign test's
    # p = (1/2)^8 says ahead, by less than CartPole's margin (run directories holding what compare reads).
    def run_directory(name, algo, minimum):
        directory = tmp_path / name
        directory.mkdir()
        agent = dict(robust=True, omega=0.1, **({"pessimism": 1.0} if algo == "fedrdqn_min" else {}))
        (directory / "config.json").write_text(json.dumps(dict(
            algo=algo, env_name="CartPole-v1", physics=["length"], num_agents=5, max_rate=0.5, steps_per_agent=2000,
            agent=agent, num_seeds=len(minimum), seed=0)))
        (directory / "metrics.json").write_text(json.dumps(dict(
            curve=dict(nominal_return=[[0.0]] * len(minimum)), final=dict(local_minimum=minimum, local_average=minimum))))
        return str(directory)

    listed = subprocess.run([*cli, "plugins"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert "its own settings (--set NAME=VALUE): pessimism (default 1.0, kappa:" in listed.stdout, listed.stdout

    fedrdqn = run_directory("fedrdqn", "fedrdqn", [100.0 + 10 * s for s in range(8)])
    mine = run_directory("mine", "fedrdqn_min", [101.0 + 10 * s for s in range(8)])
    compared = subprocess.run([*cli, "compare", fedrdqn, mine], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr[-3000:]
    [line] = [line for line in compared.stdout.splitlines() if "FedRDQN-min (ω=0.1) − FedRDQN (ω=0.1)" in line]
    assert "| 8 (paired) " in line and "| +1.0 [+1.0, +1.0] " in line and "| ahead, within the margin " in line, line


DOCS_PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "own_algorithm.md")
# Run after the page's snippets: what each defines does what the page says (in a process of its own, so
# that nothing it registers reaches the other tests' registries).
SNIPPETS_CHECK = """
from fedjax_rl.core import federated
config = MinDQNConfig(hidden_sizes=(4,))
agents.check_algorithm(ALGORITHM, "docs/own_algorithm.md")
term, fedrdqn_term = MinRobustTerm(config, None), robust.RobustTerm(config, None)
batch = agents_base.Transition(obs=jnp.zeros((3, 2)), action=jnp.zeros(3, jnp.int32), reward=jnp.ones(3),
                               next_obs=jnp.zeros((3, 2)), terminated=jnp.array([False, False, True]))
shared = dqn.DQNShared(q=None, q_target=None, degree=term.net.init(jax.random.key(1), jnp.zeros(2)))
hp = config.hparams().replace(omega=0.5, pessimism=0.0)
next_value = jnp.array([1.0, -1.0, 2.0])
assert (term.td_target(shared, batch, next_value, hp) == fedrdqn_term.td_target(shared, batch, next_value, hp)).all()

for aggregator in (MIDDLE_60, PARTICIPANTS_MEAN):
    aggregation.AGGREGATORS.register(aggregator)
leaves = {"w": jnp.array([[0.0], [1.0], [2.0], [3.0], [100.0]])}  # 5 agents' shared leaves
weights = jnp.array([1.0, 1.0, 0.0, 1.0, 1.0])
server = federated.Server(num_agents=5, aggregation="middle_60")
on_agents = lambda rule, *args: jax.vmap(rule, axis_name=agent_axis.AGENT_AXIS)(*args)
mean = on_agents(federated.Server(num_agents=5, aggregation="participants_mean").rule, leaves, weights)
assert jnp.allclose(mean["w"], (0.0 + 1.0 + 3.0 + 100.0) / 4), mean
assert jnp.allclose(on_agents(lambda x: mean_of_participants(x, None), leaves)["w"], 106.0 / 5)
middle = on_agents(lambda x: server.rule(x, None), leaves)  # drops 0 and 100, averages 1, 2, 3
assert jnp.allclose(middle["w"], 2.0), middle
print("snippets ok")
"""


def test_the_plugin_pages_snippets_run_as_written():
    """docs/own_algorithm.md's Python snippets, in order, are one module that runs: the FedRDQN-min
    agent (kappa = 0 is FedRDQN's target) and two aggregation rules on five agents' leaves."""
    with open(DOCS_PAGE) as f:
        page = f.read()
    snippets = re.findall(r"^```python\n(.*?)^```", page, flags=re.S | re.M)
    assert len(snippets) >= 4
    source = "\n".join(snippets) + "\nfrom fedjax_rl.agents import base as agents_base\n" + SNIPPETS_CHECK
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "snippets ok" in done.stdout, done.stderr[-3000:]


EXAMPLE_ENV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "own_environment")


@pytest.fixture
def forget_plugins():
    """Registries as they were after the test: whatever a test's plugins registered is removed."""
    registries = (agents.REGISTRY, aggregation.AGGREGATORS, envs.REGISTRY)
    before = [dict(r.entries) for r in registries]
    yield
    for registry, entries in zip(registries, before):
        for name in set(registry.entries) - set(entries):
            registry.entries.pop(name)
            registry.origins.pop(name)


def test_an_installed_environment_is_an_env_name_of_every_command(tmp_path, monkeypatch, capsys, forget_plugins):
    """examples/own_environment as an installed package: listed without importing it, loaded when its
    name is asked for, validated before compiling like a built-in task, named in `train --help` and in
    `fedjax-rl plugins` with what it perturbs."""
    with open(os.path.join(EXAMPLE_ENV, "slide.py")) as f:
        _fake_distribution(tmp_path, "slide_env", """
            [fedjax_rl.environments]
            Slide-v0 = slide:SPEC
            """, {"slide": f.read()})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "Slide-v0" in envs.names() and "slide" not in sys.modules
    config = configs.train_config("dqnavg", "Slide-v0", steps_per_agent=1000)
    assert config.physics == ("mass",) and envs.get("Slide-v0").name == "Slide-v0"
    with pytest.raises(SystemExit, match=r"unknown physical parameter 'friction' for Slide-v0; allowed: mass"):
        commands.main(["train", "--env", "Slide-v0", "--param", "friction"])
    assert commands.main(["plugins"]) == 0
    listed = capsys.readouterr().out
    assert "fedjax_rl.environments: 1 installed" in listed
    assert "Slide-v0 = slide:SPEC (slide_env-0.1): ok" in listed and "perturbable: mass (the default: mass)" in listed
    with pytest.raises(SystemExit):
        commands.main(["train", "--help"])
    assert "Installed plugin environments: Slide-v0." in " ".join(capsys.readouterr().out.split())
    # The example's own pyproject.toml declares it so: installed with pip, it loads.
    source, target = tmp_path / "src", tmp_path / "site"  # built from a copy: the build leaves files beside it
    shutil.copytree(EXAMPLE_ENV, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(target), str(source)], check=True, capture_output=True, text=True, cwd=tmp_path)
    path = os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))
    listed = subprocess.run([sys.executable, "-m", "fedjax_rl.cli", "plugins"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": path}, cwd=target)  # not beside the fake one above
    assert "Slide-v0 = slide:SPEC (slide_env-0.1.0): ok" in listed.stdout, listed.stdout + listed.stderr


def test_a_taken_name_is_refused_whoever_took_it(tmp_path, monkeypatch, forget_plugins):
    """A user's algorithm, aggregation rule or environment under a name a loaded plugin holds is refused,
    naming the plugin, as one under a built-in's name is."""
    _fake_distribution(tmp_path, "theirs", """
        [fedjax_rl.algorithms]
        theirs_algo = theirs:ALGORITHM
        [fedjax_rl.aggregators]
        theirs_rule = theirs:RULE
        [fedjax_rl.environments]
        Theirs-v0 = theirs:SPEC
        """, {"theirs": """
        import dataclasses
        from fedjax_rl import agents, envs
        from fedjax_rl.core import aggregation
        ALGORITHM = dataclasses.replace(agents.get("fedrdqn"), name="theirs_algo", label="Theirs")
        RULE = aggregation.Aggregator("theirs_rule", lambda server: aggregation.federated_median, robust=True)
        SPEC = dataclasses.replace(envs.get("CartPole-v1"), name="Theirs-v0")
        """})
    monkeypatch.syspath_prepend(str(tmp_path))
    theirs_algo, theirs_rule, theirs_env = (agents.get("theirs_algo"), aggregation.AGGREGATORS.get("theirs_rule"),
                                           envs.get("Theirs-v0"))
    for register, mine, kind in (
            (agents.register, dataclasses.replace(theirs_algo, label="Mine"), "algorithm"),
            (aggregation.AGGREGATORS.register, dataclasses.replace(theirs_rule, robust=False), "aggregation rule"),
            (envs.register, dataclasses.replace(theirs_env, max_steps=10), "environment")):
        with pytest.raises(ValueError, match=rf"my code: the {kind} name '{mine.name}' is already taken \(by plugin "
                                             rf"'{mine.name}' of fedjax_rl\.\w+ \(theirs:\w+, from theirs-0\.1\)\)"):
            register(mine, "my code")
