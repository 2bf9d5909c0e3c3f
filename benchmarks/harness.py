"""The one way a benchmark times its cases and writes its result.

A `Case` is a name, a `setup` that builds (compiles, warms) what is timed and returns it as a callable
of no arguments, and the settings that tell the case apart. `measure` sets every case up, calls each
`warmup` times untimed, then times one call of every case per repeat, case after case, so that the
cases share the machine's load as it drifts (the machines are shared). A timed call must finish its
work before it returns (`jax.block_until_ready`). Each call gives a row: the case's name and settings,
the repeat, wall seconds (`time.perf_counter`), CPU seconds of this process over all its threads
(`time.process_time`) and of the child processes it waited for (`children_cpu_s`); a call that
returns a dict (a count of agent-steps, a compile time) adds its items to the row.

`write` writes the one result format, a JSON object of six keys:

    benchmark  the module under benchmarks/, e.g. "throughput.dqn_throughput"
    machine    `common.machine()` taken at the start, with the load average at the end added
    commit     {"sha": git HEAD, "dirty": whether tracked files differed from it} (a result converted from
               the formats before this one: sha null, and `committed_in`, the commit that recorded it)
    argv       the command that ran it: ["python", "-m", "benchmarks.<benchmark>", ...its arguments]
    settings   what the run held fixed (a dict)
    rows       what it measured, one dict per case and repeat (or per result, for a study)

and `read` reads one back. `parser` is the argparse parser every benchmark starts from (`--out`, and
`--repeats` where the benchmark repeats). Run a benchmark from the repository's root as
`python -m benchmarks.<group>.<name>`; its result goes to `benchmarks/results/<group>/<name>.json`.

Only the standard library here: importing the harness costs nothing (the library's machine record,
and with it JAX, is imported when a result is written without one).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Iterable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
FIELDS = ("benchmark", "machine", "commit", "argv", "settings", "rows")


@dataclasses.dataclass(frozen=True)
class Case:
    """One thing to time: `setup()` returns the callable that is timed (its own cost is not timed
    with the calls; `measure` records it apart). `warmup`: the untimed calls before the repeats when
    they differ from `measure`'s (0 for a call that warms itself up, such as a subprocess that times
    its own steady state)."""

    name: str
    setup: Callable[[], Callable[[], Any]]
    settings: dict = dataclasses.field(default_factory=dict)
    warmup: int | None = None


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


@dataclasses.dataclass(frozen=True)
class Clock:
    """Where the seconds come from (a test gives a fake one)."""

    wall: Callable[[], float] = time.perf_counter
    cpu: Callable[[], float] = time.process_time
    children_cpu: Callable[[], float] = _children_cpu


CLOCK = Clock()


def time_call(call: Callable[[], Any], clock: Clock = CLOCK) -> dict:
    """Wall, CPU and child-process CPU seconds of one `call()`, with the items of what it returns
    when that is a dict."""
    wall, cpu, children = clock.wall(), clock.cpu(), clock.children_cpu()
    out = call()
    row = dict(wall_s=clock.wall() - wall, cpu_s=clock.cpu() - cpu, children_cpu_s=clock.children_cpu() - children)
    if isinstance(out, dict):
        row.update(out)
    return row


def measure(cases: Iterable[Case], repeats: int, warmup: int = 1, clock: Clock = CLOCK) -> list[dict]:
    """Rows of `repeats` timed calls of every case, interleaved (case 1, case 2, ..., case 1, ...),
    after `warmup` untimed calls of each (`Case.warmup` where a case sets it). Each row holds the
    case's setup seconds (`setup_wall_s`, `setup_cpu_s`, `setup_children_cpu_s`: building and
    compiling it) and the wall seconds of its untimed calls together (`warmup_wall_s`: a first call
    that compiles or fills a buffer) beside its call's."""
    cases = list(cases)
    calls, setup = {}, {}
    for case in cases:
        built = time_call(lambda c=case: {"call": c.setup()}, clock)
        calls[case.name] = built.pop("call")
        untimed = warmup if case.warmup is None else case.warmup
        warm = time_call(lambda c=case, n=untimed: [calls[c.name]() for _ in range(n)], clock)
        setup[case.name] = dict(setup_wall_s=built["wall_s"], setup_cpu_s=built["cpu_s"],
                                setup_children_cpu_s=built["children_cpu_s"], warmup_wall_s=warm["wall_s"])
    rows = []
    for repeat in range(repeats):
        for case in cases:
            timed = time_call(calls[case.name], clock)
            rows.append(dict(case=case.name, **case.settings, repeat=repeat, **timed, **setup[case.name]))
    return rows


def median(rows: Iterable[dict], key: str, **match) -> float:
    """The median of `key` over the rows whose items include `match` (e.g. `case="jax"`)."""
    values = [row[key] for row in rows if all(row.get(k) == v for k, v in match.items())]
    if not values:
        raise KeyError(f"no row with {match}")
    return statistics.median(values)


def medians(rows: Iterable[dict], keys: Iterable[str], **match) -> dict:
    """`median` of each of `keys` that the matching rows hold (a case's summary)."""
    rows = [row for row in rows if all(row.get(k) == v for k, v in match.items())]
    return {key: statistics.median(row[key] for row in rows) for key in keys if rows and key in rows[0]}


def commit() -> dict:
    """The checkout's HEAD and whether tracked files differ from it (None outside git)."""
    def git(*args):
        done = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return dict(sha=sha, dirty=None if status is None else bool(status))


def default_out(benchmark: str) -> str:
    """benchmarks/results/<group>/<name>.json for "group.name" (or "benchmarks.group.name")."""
    parts = benchmark.removeprefix("benchmarks.").split(".")
    return os.path.join(RESULTS, *parts[:-1], parts[-1] + ".json")


def record(benchmark: str, settings: dict, rows: list[dict], machine: dict | None = None,
           argv: list[str] | None = None) -> dict:
    """The result as `write` writes it (see the module's docstring)."""
    benchmark = benchmark.removeprefix("benchmarks.")
    if machine is None:
        from fedjax_rl.training.machine import describe

        machine = describe()
    machine = dict(machine)
    if hasattr(os, "getloadavg"):
        machine.setdefault("load_average_1_5_15min_at_end", list(os.getloadavg()))
    if argv is None:
        argv = ["python", "-m", f"benchmarks.{benchmark}", *sys.argv[1:]]
    return dict(benchmark=benchmark, machine=machine, commit=commit(), argv=list(argv), settings=dict(settings),
                rows=list(rows))


def write(path: str | None, benchmark: str, settings: dict, rows: list[dict], machine: dict | None = None,
          argv: list[str] | None = None) -> str:
    """Write the result (`record`'s) to `path` (default `default_out(benchmark)`); returns the path."""
    return dump(path or default_out(benchmark), record(benchmark, settings, rows, machine, argv))


def dump(path: str, result: dict) -> str:
    """Write a whole result as it is, after checking its fields (for a result carried over from an
    earlier one: a part kept, a converted record)."""
    if not isinstance(result, dict) or set(result) != set(FIELDS):
        raise ValueError(f"a result has exactly the fields {FIELDS}; got {sorted(result)}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:  # then renamed: a run cut short while writing keeps the last result
        json.dump(result, f, indent=1, default=_plain)
        f.write("\n")
    os.replace(path + ".tmp", path)
    shown = os.path.relpath(path) if os.path.abspath(path).startswith(ROOT + os.sep) else path
    print(f"wrote {shown}")
    return path


def _plain(value):
    """numpy scalars and arrays as JSON numbers and lists; anything else JSON has no type for as its str."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def read(path: str) -> dict:
    """A result written by `write`."""
    with open(path) as f:
        result = json.load(f)
    if not isinstance(result, dict) or set(result) != set(FIELDS):
        raise ValueError(f"{path} is not a benchmark result (fields {FIELDS})")
    return result


def rows_by(result: dict, key: str) -> dict:
    """The rows of a result keyed by one of their items (e.g. a study's `part`)."""
    return {row[key]: row for row in result["rows"]}


def parser(benchmark: str, doc: str | None, repeats: int | None = None) -> argparse.ArgumentParser:
    """The benchmark's argument parser: `--out` (default `default_out(benchmark)`) and, when `repeats`
    is given, `--repeats` with that default. The description is the docstring's first paragraph."""
    out = argparse.ArgumentParser(prog=f"python -m benchmarks.{benchmark.removeprefix('benchmarks.')}",
                                  description=(doc or "").strip().split("\n\n")[0])
    out.add_argument("--out", default=default_out(benchmark),
                     help="the result file (default: %(default)s)")
    if repeats is not None:
        out.add_argument("--repeats", type=int, default=repeats,
                         help="timed calls of each case, interleaved (default: %(default)s)")
    return out
