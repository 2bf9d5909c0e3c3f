"""Every command of docs/flower.md runs as written (issue 89): each is read from the page itself, so
that a test runs the page's text and an edit of either shows.

`COMMANDS` accounts for every command of the page's code blocks: the test that runs it, or why none
can. The default suite runs what fits its budget (the flags of every Flower command against the
installed Flower's own `--help`, the run configurations against the example app, `fedjax-rl status`
on a run directory, the Python example with Flower's engine replaced by a recorder, and the loopback
commands against the ones the deployment test starts); the `deployment` step runs the simulation
block, the Python example and TLS step by step for real, on 127.0.0.1, each stopping every process
it started.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from loopback import private_network

os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
pytest.importorskip("flwr")

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "flower.md"
EXAMPLE = ROOT / "examples" / "flower_app"
BIN = pathlib.Path(sys.executable).parent

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")


def code_blocks(language: str) -> list[tuple[str, str]]:
    """(the heading above it, its text) of every block of `language` on the page, in order; a block
    inside a list item is dedented."""
    found, heading, block, indent = [], "", None, ""
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        match = FENCE.match(line)
        if block is None:
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            elif match and match.group(2) == language:
                block, indent = [], match.group(1)
            continue
        if match and not match.group(2):
            found.append((heading, "\n".join(block)))
            block = None
        else:
            block.append(line[len(indent):] if line.startswith(indent) else line)
    return found


def commands(text: str) -> list[str]:
    """A shell block's commands, each on one line (continuations joined), comments dropped, words as the
    shell splits them, joined again with `shlex.join`."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [shlex.join(words) for line in joined.splitlines() if (words := shlex.split(line, comments=True))]


def page_commands() -> list[str]:
    return [command for _, text in code_blocks("bash") for command in commands(text)]


def command(prefix: str) -> list[str]:
    """The words of the page's command `prefix`, or of its one command that starts with it (a command the
    page gives twice counts once)."""
    on_page = set(page_commands())
    [found] = [prefix] if prefix in on_page else [c for c in on_page if c.startswith(prefix)]
    return shlex.split(found)


SIMULATION = "One machine, simulation"
DEPLOYMENT_STEP = "the deployment step: test_the_simulation_block_runs_as_written"
LOOPBACK = ("the default suite: test_the_loopback_commands_are_the_deployment_tests (the deployment step runs them: "
            "test_flower.py's deployment tests)")
TLS = "the deployment step: test_tls_step_by_step_runs_as_written"

AUTH = "the deployment step: test_supernode_authentication_step_by_step_runs_as_written"
TLS_LINK = ("flower-superlink --host 0.0.0.0 --port 9091 --ssl-ca-certfile ca.crt --ssl-certfile server.pem --ssl-keyfile "
            "server.key --disable-runtime-dependency-installation")
TLS_NODE = ("flower-supernode --superlink server.example.org:9091 --root-certificates ca.crt --node-config "
            "'partition-id=0 length=1.3 state-dir=\"/var/lib/fedjax_rl\"'")
AUTH_KEYS = "ssh-keygen -t ecdsa -b 384 -N '' -f node_0"
AUTH_LINK = TLS_LINK + " --enable-supernode-auth"
AUTH_REGISTER = "flwr supernode register node_0.pub my-superlink"
AUTH_NODE = ("flower-supernode --superlink server.example.org:9091 --root-certificates ca.crt --auth-supernode-private-key "
             "node_0 --node-config 'partition-id=0 length=1.3 state-dir=\"/var/lib/fedjax_rl\"'")

# Every command of the page: where it runs, or why it does not.
COMMANDS = {
    'pip install \'fedjax-rl[flower]\'': "not run: it installs from the package index; the suites run in the environment "
                                         "it makes (`make` installs the `flower` extra)",
    "cd examples/flower_app": DEPLOYMENT_STEP,
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 flwr run . --stream --run-config 'seed=3 agent.omega=0.2'":
        DEPLOYMENT_STEP,
    "fedjax-rl status runs/flower_cartpole --wait 600": DEPLOYMENT_STEP + "; the default suite: "
                                                        "test_status_reads_a_run_directory_as_the_page_says",
    "pkill -f 'flower-superlink --insecure --simulation'": "not run (it stops every simulation SuperLink of the user); "
        "the deployment step checks that it matches the SuperLink `flwr run` left running, and stops that one itself",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 flwr run . --stream --run-config num-agents=3 "
    "--federation-config num-supernodes=3": DEPLOYMENT_STEP,
    TLS_LINK: TLS + " (on 127.0.0.1, another port)",
    TLS_NODE: TLS + " (127.0.0.1 for the server's name; a --port each, on one host)",
    AUTH_KEYS: AUTH + " (node_1 and node_2 made the same way)",
    AUTH_LINK: AUTH + " (on 127.0.0.1, another port)",
    AUTH_REGISTER: AUTH + " (and node_1.pub)",
    AUTH_NODE: AUTH + " (127.0.0.1 for the server's name; a --port each, on one host; node_2's key unregistered)",
    "flwr run examples/flower_app my-superlink --stream": TLS + " (with a small --run-config)",
    "flower-superlink --insecure --disable-runtime-dependency-installation --host 127.0.0.1 --port 9091": LOOPBACK,
    **{f"flower-supernode --insecure --superlink 127.0.0.1:9091 --host 127.0.0.1 --port {9094 + k} --node-config "
       f"'partition-id={k} length={length}'": LOOPBACK for k, length in enumerate(("0.8", "1.0", "1.3"))},
    "flwr run examples/flower_app my-superlink --stream --run-config num-agents=3": LOOPBACK,
    **{line: TLS for line in (
        "openssl req -x509 -newkey rsa:2048 -sha256 -days 365 -nodes -subj '/CN=fedjax-rl federation CA' -keyout ca.key "
        "-out ca.crt",
        "openssl req -newkey rsa:2048 -sha256 -nodes -subj /CN=server.example.org -keyout server.key -out server.csr",
        "printf 'subjectAltName=DNS:server.example.org,DNS:localhost,IP:127.0.0.1\\n' '>' server.ext",
        "openssl x509 -req -sha256 -days 365 -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -extfile "
        "server.ext -out server.pem")},
}


def test_every_command_on_the_page_is_accounted_for():
    """A command added to the page, or changed, must say here where it runs: a test that runs the page's
    text (or why none can)."""
    on_page = page_commands()
    missing = sorted(set(on_page) - set(COMMANDS))
    gone = sorted(set(COMMANDS) - set(on_page))
    assert not missing and not gone, f"commands of the page that no test accounts for: {missing}; accounted for but " \
                                     f"no longer on the page: {gone}"


def flower_parse(words: list[str]) -> None:
    """Parse a Flower command's words with the installed Flower's own parser, running nothing: an
    unknown flag or a bad value raises. The SuperLink's and SuperNode's argparse parsers, `flwr`'s click
    commands (what their `--help` prints)."""
    if words[0] in ("flower-superlink", "flower-supernode"):
        if words[0] == "flower-superlink":
            from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink as parser
        else:
            from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode as parser
        parsing = parser()
        parsing.allow_abbrev = False  # the page spells each flag whole
        parsing.parse_args(words[1:])
        return
    import typer

    from flwr.cli.app import app

    command, name, args = typer.main.get_command(app), words[0], words[1:]
    context = None
    while hasattr(command, "get_command") and args and not args[0].startswith("-"):
        context = command.make_context(name, [args[0]], parent=context, resilient_parsing=True)
        name, command = args[0], command.get_command(context, args[0])
        assert command is not None, f"flwr has no command {words[:words.index(name) + 1]}"
        args = args[1:]
    command.make_context(name, list(args), parent=context)


def test_the_flower_commands_parse_with_the_installed_flower():
    """Each Flower command of the page (and the `flwr federation` one its text gives) parses with the
    installed Flower's own parser: its flags exist and take the page's values."""
    import click

    page = PAGE.read_text(encoding="utf-8")
    lines = page_commands() + [shlex.join(shlex.split(m)) for m in re.findall(r"`(flwr federation [^`]*)`", page)]
    parsed = []
    for line in lines:
        words = shlex.split(line)
        words = words[1:] if "=" in words[0] else words  # an environment variable before the command
        if words[0] in ("flower-superlink", "flower-supernode", "flwr"):
            try:
                flower_parse(words)
            except (click.ClickException, SystemExit) as error:
                raise AssertionError(f"the installed Flower refuses {line!r}: {error}") from None
            parsed.append(words[0] if words[0] != "flwr" else " ".join(words[:2]))
    assert set(parsed) == {"flower-superlink", "flower-supernode", "flwr run", "flwr federation", "flwr supernode"}, parsed
    with pytest.raises((click.ClickException, SystemExit)):  # the check can fail
        flower_parse(["flwr", "run", ".", "--no-such-flag"])
    with pytest.raises(SystemExit):
        flower_parse(["flower-supernode", "--root-certificate", "ca.crt"])


def test_the_run_configs_are_the_example_apps():
    """Each `--run-config` of the page names keys the example app declares (Flower refuses others) and
    values the apps read; `--federation-config` names a setting of Flower's simulation."""
    import tomllib

    from flwr.common.config import parse_config_args
    from flwr.proto.federation_config_pb2 import SimulationConfig

    from fedjax_rl.flower import apps

    declared = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    checked = 0
    for line in sorted(set(page_commands())):
        words = shlex.split(line)
        for flag, value in zip(words, words[1:]):
            if flag == "--run-config":
                overrides = parse_config_args([value])
                assert set(overrides) <= set(declared), sorted(set(overrides) - set(declared))
                config, seed, _, _ = apps.config_from_run_config({**declared, **overrides})
                assert (config.num_agents, seed) == (overrides.get("num-agents", declared["num-agents"]),
                                                     overrides.get("seed", declared["seed"]))
                checked += 1
            elif flag == "--federation-config":
                for key in parse_config_args([value]):
                    assert key.replace("-", "_") in SimulationConfig.DESCRIPTOR.fields_by_name, key
                checked += 1
    assert checked == 4


def test_the_config_toml_is_one_flower_reads(tmp_path, monkeypatch):
    """The page's config.toml, read by the installed Flower: the local connection its default, the
    SuperLink's by name; and a relative root-certificates refused, as the page says."""
    from flwr.cli.flower_config import read_superlink_connection

    [(_, text)] = code_blocks("toml")
    (tmp_path / "config.toml").write_text(text)
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    assert read_superlink_connection(None).address == ":local:"
    mine = read_superlink_connection("my-superlink")
    assert (mine.address, mine.root_certificates) == ("server.example.org:9091", "/home/me/fedjax/ca.crt")
    (tmp_path / "config.toml").write_text(text.replace('"/home/me/fedjax/ca.crt"', '"ca.crt"'))
    with pytest.raises(Exception, match="expected absolute path"):
        read_superlink_connection("my-superlink")


def _finished_run(where: pathlib.Path) -> None:
    """A finished run directory at `where`: a committed one's config.json and finished.json (what
    `fedjax-rl status` reads)."""
    committed = next(path.parent for path in sorted((ROOT / "results").glob("*/*/*/*/*/finished.json"))
                     if "grid" not in json.loads(path.read_text()))
    where.mkdir(parents=True)
    for name in ("config.json", "finished.json"):
        shutil.copy(committed / name, where / name)


def test_status_reads_a_run_directory_as_the_page_says(tmp_path, monkeypatch, capsys):
    """The page's `fedjax-rl status` (its entry point, in this process) on a finished run directory."""
    from fedjax_rl.cli import commands

    words = command("fedjax-rl status")
    _finished_run(tmp_path / words[2])
    monkeypatch.chdir(tmp_path)
    try:
        code = commands.main(words[1:])
    except SystemExit as exit_:
        code = exit_.code
    assert (code, capsys.readouterr().out.strip()) == (0, f"{words[2]}: finished")


def test_the_python_example_builds_the_apps_it_hands_to_flower(tmp_path, monkeypatch):
    """The page's Python block, run as written with Flower's engine replaced by a recorder (the
    deployment step runs it for real): a ServerApp and a ClientApp of the library, one SuperNode per
    agent."""
    import flwr.simulation
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    from fedjax_rl.training import machine

    [(_, source)] = code_blocks("python")
    called = []
    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda *args, **kwargs: called.append((args, kwargs)))
    monkeypatch.setattr(machine, "use_compilation_cache", lambda: None)  # no change to this process's JAX
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(source, str(PAGE), "exec"), scope)
    [(args, kwargs)] = called
    assert isinstance(args[0], ServerApp) and isinstance(args[1], ClientApp)
    assert kwargs == {"num_supernodes": scope["config"].num_agents} and scope["config"].num_agents == 3
    assert not any(tmp_path.iterdir())  # nothing ran


def test_the_loopback_commands_are_the_deployment_tests(tmp_path, monkeypatch):
    """The page's SuperLink and SuperNodes on one host are what `test_flower.Deployment` starts (its
    ports aside, and the state database it keeps in its Flower home), and its `flwr run` is the page's
    (its run configuration aside)."""
    import test_flower

    started = []

    class Recorded:
        pid = 0

        def poll(self):
            return None

    def start(self, name, *args, log):
        started.append([name, *args])
        self.processes.append(Recorded())
        return self.processes[-1]

    monkeypatch.setattr(test_flower.Deployment, "start", start)
    monkeypatch.setattr(test_flower.Deployment, "wait_for_port", lambda *args, **kwargs: None)
    link = command("flower-superlink --insecure")
    nodes = [command(f"flower-supernode --insecure --superlink 127.0.0.1:9091 --host 127.0.0.1 --port {9094 + k}")
             for k in range(3)]
    deployment = test_flower.Deployment(tmp_path, 3, [n[-1] for n in nodes])
    deployment.link_port, deployment.node_ports = 9091, [9094, 9095, 9096]
    deployment.__enter__()  # records the commands, starts nothing
    superlink = started[0]
    database = superlink.index("--database")
    assert superlink[:database] + superlink[database + 2:] == link
    assert started[1:] == nodes
    run = command("flwr run examples/flower_app my-superlink --stream --run-config")
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kwargs: ran.append(argv))
    deployment.run("examples/flower_app", run[-1], 1)
    assert [os.path.basename(ran[0][0]), *ran[0][1:]] == run
    assert f'[superlink.{run[3]}]' in (tmp_path / "config.toml").read_text()


# -- the deployment step: the page's blocks run for real, on 127.0.0.1 --------------------------------


def _make_key_pair(keygen: list[str], name: str, where: pathlib.Path) -> None:
    """The page's `ssh-keygen` command for party `name`. A host without OpenSSH's client gets the same two
    files (OpenSSH private key, OpenSSH public key, P-384) from `cryptography`, which Flower itself uses."""
    if shutil.which(keygen[0]):
        words = [w.replace("node_0", name) for w in keygen]
        done = subprocess.run(words, cwd=where, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP384R1())
    (where / name).write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                 serialization.NoEncryption()))
    (where / f"{name}.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                                      serialization.PublicFormat.OpenSSH))


def _stop_everything_under(home: pathlib.Path) -> None:
    """Stop every process whose environment carries this Flower home (each was started by the test: the
    local SuperLink `flwr run` detaches, its executor, the ServerApp's and Ray's), children first."""
    import psutil

    mine = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("FLWR_HOME") == str(home) and process.pid != os.getpid():
                mine.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    from test_flower import stop_processes

    stop_processes(mine)


def _flower_env(home: pathlib.Path) -> dict:
    """A Flower home of the test's own, and the local SuperLink `flwr run` starts on free ports of 127.0.0.1
    (not a user's 39091)."""
    from test_flower import free_ports

    http_port, control_port = free_ports(2)
    home.mkdir()
    return {**os.environ, "FLWR_HOME": str(home), "FLWR_DISABLE_UPDATE_CHECK": "1", "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(http_port), "FLWR_LOCAL_CONTROL_API_PORT": str(control_port),
            "PATH": str(BIN) + os.pathsep + os.environ.get("PATH", "")}


@pytest.mark.deployment
def test_the_simulation_block_runs_as_written(tmp_path):
    """The block in a fresh copy of the example app: `flwr run` starts the local SuperLink, two SuperNodes
    run the example's two agents, the relative out-dir lands under the directory the SuperLink was
    started in, `fedjax-rl status` reads it there (exit 0), and the SuperLink is left running, where the
    page's `pkill` pattern finds it. Then three agents on three SuperNodes, as the page asks for them."""
    import psutil

    block = [text for heading, text in code_blocks("bash") if heading == SIMULATION][0]
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "flower_app", ignore=shutil.ignore_patterns("runs", "__pycache__"))
    home = tmp_path / "flower_home"
    env = _flower_env(home)
    with private_network():  # Flower's simulation engine: Ray's processes (tests/loopback.py)
        try:
            done = subprocess.run(["bash", "-e", "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=1200)
            assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
            run = tmp_path / "examples" / "flower_app" / "runs" / "flower_cartpole"
            assert done.stdout.strip().endswith("runs/flower_cartpole: finished"), done.stdout[-2000:]
            recorded = json.loads((run / "config.json").read_text())
            assert (recorded["seed"], recorded["agent"]["omega"], recorded["num_agents"]) == (3, 0.2, 2)
            with open(run / "final.csv") as f:  # the run's seed, as its command gave it
                assert [line.split(",")[0] for line in f.read().splitlines()] == ["seed", "3"]
            links = [p for p in psutil.process_iter(["cmdline", "environ"])
                     if (p.info["environ"] or {}).get("FLWR_HOME") == str(home)
                     and "flower-superlink --insecure --simulation" in " ".join(p.info["cmdline"] or ())]
            assert len(links) == 1, "the local SuperLink is not left running where the page's pkill finds it"
            # Three agents: the page's command (its size made small, and another out-dir beside the first).
            words = command(
                "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 flwr run . --stream --run-config num-agents=3")
            three = subprocess.run(words[1:] + ["--run-config", 'steps-per-agent=400 eval-every-rounds=2 '
                                                                'out-dir="runs/three"'],
                                   cwd=tmp_path / "examples" / "flower_app", capture_output=True, text=True,
                                   timeout=900, env={**env, **dict([words[0].split("=")])})
            assert (tmp_path / "examples" / "flower_app" / "runs" / "three" / "finished.json").exists(), (
                three.stdout[-4000:] + three.stderr[-4000:])
            assert json.loads((tmp_path / "examples" / "flower_app" / "runs" / "three" / "config.json").read_text())[
                "num_agents"] == 3
        finally:
            _stop_everything_under(home)


@pytest.mark.deployment
def test_the_python_example_runs_as_written(tmp_path):
    """The page's Python block in a fresh process: the run directory lands in its current directory."""
    [(_, source)] = code_blocks("python")
    home = tmp_path / "flower_home"
    env = _flower_env(home)
    with private_network():  # the block runs Flower's simulation engine: Ray's processes (tests/loopback.py)
        try:
            done = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=900)
        finally:
            _stop_everything_under(home)
    assert (tmp_path / "runs" / "flower" / "finished.json").exists(), done.stdout[-4000:] + done.stderr[-4000:]


def _tls_deployment(tmp_path, num_nodes: int):
    """The page's TLS steps on 127.0.0.1: its openssl commands make the certificates in a fresh Flower
    home, whose config.toml holds the page's entry for a SuperLink on this host's free port. Returns the
    home, the `Deployment` (ports for the SuperLink and `num_nodes` SuperNodes) and the SuperLink's
    address."""
    from test_flower import Deployment

    [openssl] = [text for heading, text in code_blocks("bash") if "openssl" in text]
    home = tmp_path / "flower_home"
    home.mkdir()
    deployment = Deployment(home, num_nodes, [])
    done = subprocess.run(["bash", "-e", "-c", openssl], cwd=home, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    address = f"127.0.0.1:{deployment.link_port}"
    with open(home / "config.toml", "w") as f:
        f.write(f'[superlink]\ndefault = "my-superlink"\n\n[superlink.my-superlink]\naddress = "{address}"\n'
                f'root-certificates = "{home / "ca.crt"}"\n')
    return home, deployment, address


@pytest.mark.deployment
def test_tls_step_by_step_runs_as_written(tmp_path):
    """The page's openssl steps make the certificates; the page's SuperLink serves with them, two of the
    page's SuperNodes trust the CA (the server's name and 0.0.0.0 made 127.0.0.1, a --port each on one
    host), and the page's `flwr run` reaches the SuperLink through a connection whose root-certificates
    is the CA's absolute path: a small federation finishes, over TLS."""
    from test_flower import SEED, run_config_text, small_config

    home, deployment, address = _tls_deployment(tmp_path, 2)
    link = [w.replace("0.0.0.0", "127.0.0.1").replace("9091", str(deployment.link_port)) for w in command(TLS_LINK)]
    node = command(TLS_NODE)
    out = tmp_path / "run"
    config = small_config(steps_per_agent=200, eval_every_rounds=2)
    try:
        server = deployment.start(*link, log="superlink.log")
        deployment.wait_for_port(deployment.link_port, server, "superlink.log")
        for k in range(2):
            words = [w.replace("server.example.org:9091", address) for w in node]
            words[-1] = words[-1].replace("partition-id=0", f"partition-id={k}").replace(
                "/var/lib/fedjax_rl", str(tmp_path / "state"))
            deployment.start(*words, "--host", "127.0.0.1", "--port", str(deployment.node_ports[k]), log=f"node_{k}.log")
        run = command("flwr run examples/flower_app my-superlink --stream")
        started = time.monotonic()
        done = subprocess.run([deployment.which("flwr"), *run[1:], "--run-config", run_config_text(config, SEED, str(out))],
                              cwd=ROOT, env=deployment.env, capture_output=True, text=True, timeout=900)
        print(f"a TLS federation of 4 rounds: {time.monotonic() - started:.0f} s")
    finally:
        deployment.__exit__(None, None, None)
    logs = "\n".join((home / name).read_text()[-2000:] for name in ("superlink.log", "node_0.log"))
    assert (out / "finished.json").exists(), done.stdout[-3000:] + done.stderr[-3000:] + logs
    assert "insecure channel" not in (home / "node_0.log").read_text(), logs


@pytest.mark.deployment
def test_supernode_authentication_step_by_step_runs_as_written(tmp_path):
    """The page's SuperNode authentication on 127.0.0.1: the TLS steps' certificates, a key pair per party
    made by the page's `ssh-keygen`, the page's SuperLink with `--enable-supernode-auth`, and the page's
    `flwr supernode register` for parties 0 and 1 only. Three SuperNodes start with the page's command,
    each with its own private key: the two registered ones train a small federation to its end; the
    third, whose key nobody registered, and a fourth without a key (the TLS steps' SuperNode) are refused
    and are not among the SuperLink's nodes."""
    from test_flower import SEED, run_config_text, small_config

    home, deployment, address = _tls_deployment(tmp_path, 4)
    for k in range(3):
        _make_key_pair(command(AUTH_KEYS), f"node_{k}", home)
    link = [w.replace("0.0.0.0", "127.0.0.1").replace("9091", str(deployment.link_port)) for w in command(AUTH_LINK)]
    out = tmp_path / "run"
    try:
        server = deployment.start(*link, log="superlink.log")
        deployment.wait_for_port(deployment.link_port, server, "superlink.log")
        for k in range(2):
            register = [w.replace("node_0", f"node_{k}") for w in command(AUTH_REGISTER)]
            done = subprocess.run([deployment.which("flwr"), *register[1:]], cwd=home, env=deployment.env,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
        # Parties 0 and 1 registered; 2 with a key nobody registered; 3 with none (the TLS steps' SuperNode).
        intruders = []
        for k in range(4):
            words = [w.replace("server.example.org:9091", address).replace("node_0", f"node_{k}")
                     for w in command(AUTH_NODE if k < 3 else TLS_NODE)]
            words[-1] = words[-1].replace("partition-id=0", f"partition-id={k}").replace(
                "/var/lib/fedjax_rl", str(tmp_path / f"state_{k}"))
            node = deployment.start(*words, "--host", "127.0.0.1", "--port", str(deployment.node_ports[k]),
                                    log=f"node_{k}.log")
            intruders += [node] if k >= 2 else []
        config = small_config(steps_per_agent=200, eval_every_rounds=2)
        done = subprocess.run([deployment.which("flwr"), *command("flwr run examples/flower_app my-superlink --stream")[1:],
                               "--run-config", run_config_text(config, SEED, str(out))],
                              cwd=ROOT, env=deployment.env, capture_output=True, text=True, timeout=900)
        listed = subprocess.run([deployment.which("flwr"), "supernode", "ls", "my-superlink", "--format", "json"],
                                cwd=home, env=deployment.env, capture_output=True, text=True, timeout=120)
        refused_exits = [node.poll() for node in intruders]  # before the processes are stopped
    finally:
        deployment.__exit__(None, None, None)
    logs = "\n".join(f"== {name}\n" + (home / name).read_text()[-2000:]
                     for name in ("superlink.log", "node_0.log", "node_2.log", "node_3.log"))
    assert (out / "finished.json").exists(), done.stdout[-3000:] + done.stderr[-3000:] + logs
    nodes = json.loads(listed.stdout)["nodes"]
    assert [n["status"] for n in nodes] == ["online", "online"], listed.stdout + listed.stderr
    # The unregistered parties' SuperNodes gave up, refused by the SuperLink.
    assert all(code not in (None, 0) for code in refused_exits), (refused_exits, logs)
    assert "Failed to activate SuperNode" in (home / "node_2.log").read_text(), logs
    assert "SuperNode authentication is enabled" in (home / "node_3.log").read_text(), logs
