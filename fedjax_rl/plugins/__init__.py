"""Extensions from outside the library: Python entry points, found without importing them.

A package extends fedjax_rl by declaring an entry point in one of the groups below (in its
pyproject.toml, `[project.entry-points."fedjax_rl.algorithms"]`, `fedrdqn_min = "fedrdqn_min:ALGORITHM"`);
`pip install` of that package is then enough. The name is what a user types (`--algo fedrdqn_min`),
the value an object of the group's kind (`agents.Algorithm`, `core.aggregation.Aggregator`).

Two steps, kept apart so that the command line stays fast and whole:

  * `installed(group)` lists the installed entry points by reading the distributions' entry_points.txt
    files: no plugin is imported, nor JAX (`fedjax-rl train --help` lists them in `--algo`'s choices);
  * `load(entry_point)` imports one, when it is asked for by name. A plugin that fails to import
    raises a `PluginError` naming it, its value and its distribution; the built-in names and every
    other plugin are untouched by it.

A `Registry` holds the objects of one kind by name (`fedjax_rl.agents`' algorithms,
`fedjax_rl.core.federated`'s aggregation rules, `fedjax_rl.envs`' environments), with one vocabulary
for all three (`register`, `get`, `names`, `known`) and one rule for a taken name, whoever took it:
the library registers its own through it exactly as a user's code or plugin does. A registry's
namespaces (`Namespace`: the environments' `brax:` and `gym:`) are names another library holds,
resolved by the registry itself when asked for. `registries()` lists every registry made, for
`fedjax-rl plugins`.
"""

from __future__ import annotations

import collections
import collections.abc
import functools
import os
import re
import sys

# The entry-point groups, one per registry: algorithms (`fedjax_rl.agents`), aggregation rules
# (`fedjax_rl.core.federated`) and environments (`fedjax_rl.envs`).
ALGORITHM_GROUP = "fedjax_rl.algorithms"
AGGREGATOR_GROUP = "fedjax_rl.aggregators"
ENVIRONMENT_GROUP = "fedjax_rl.environments"
GROUPS = (ALGORITHM_GROUP, AGGREGATOR_GROUP, ENVIRONMENT_GROUP)


class PluginError(ValueError):
    """A plugin could not be loaded or registered; the message names it."""


class EntryPoint(collections.namedtuple("EntryPoint", "group name value distribution")):
    """One installed entry point: its group, its name, its value ("module:attribute") and its
    distribution. (A named tuple: `fedjax-rl --help` lists plugins, and a dataclass would cost it the
    import of `inspect`.)"""

    __slots__ = ()

    def describe(self) -> str:
        """How an error names the plugin: its name, group, value and distribution."""
        return f"plugin {self.name!r} of {self.group} ({self.value}, from {self.distribution})"


def _metadata_dirs(path: tuple[str, ...]):
    """(directory, distribution) of every distribution's metadata on `path` (sys.path), in its order."""
    for folder in path:
        try:
            entries = sorted(os.scandir(folder or "."), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith((".dist-info", ".egg-info")) and entry.is_dir():
                yield entry.path, entry.name.rsplit(".", 1)[0]


def _parse(text: str):
    """(section, name, value) of an entry_points.txt (an INI file: [group], then name = value)."""
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif "=" in line and section is not None:
            name, value = (part.strip() for part in line.split("=", 1))
            yield section, name, value


def installed(group: str) -> dict[str, EntryPoint]:
    """{name: entry point} of `group`, read from the installed distributions' metadata without
    importing any plugin; where two distributions declare one name, the first on sys.path."""
    return dict(_installed(tuple(sys.path)).get(group, ()))


@functools.lru_cache(maxsize=8)
def _installed(path: tuple[str, ...]) -> dict[str, tuple[tuple[str, EntryPoint], ...]]:
    """Every entry point on `path`, read in one pass: {group: ((name, entry point), ...)}."""
    found, seen = {}, set()
    for directory, dist in _metadata_dirs(path):
        project = dist.split("-")[0].lower().replace("_", "-")
        if project in seen:
            continue
        seen.add(project)
        try:
            with open(os.path.join(directory, "entry_points.txt"), encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue
        for section, name, value in _parse(text):
            found.setdefault(section, {}).setdefault(name, EntryPoint(section, name, value, dist))
    return {group: tuple(entries.items()) for group, entries in found.items()}


# Set to 1 for the whole traceback of a plugin that fails to load in its error message.
TRACEBACK_ENV = "FEDJAX_RL_TRACEBACK"


def load(entry_point: EntryPoint):
    """The object `entry_point` names, imported; a PluginError naming the plugin, the file and line
    where its import failed (the whole traceback with FEDJAX_RL_TRACEBACK=1) if it cannot be."""
    import importlib

    module_name, _, attribute = entry_point.value.partition(":")
    try:
        obj = importlib.import_module(module_name.strip())
        for part in filter(None, attribute.strip().split(".")):
            obj = getattr(obj, part)
    except Exception as err:  # noqa: BLE001 - any failure of a plugin's import is that plugin's
        raise PluginError(f"{entry_point.describe()} failed to load: {type(err).__name__}: {err}"
                          f"{_where(err)}") from err
    return obj


def _where(err: Exception) -> str:
    """' (at FILE:LINE; ...)': where `err` was raised (a syntax error: where the bad line is), and with
    FEDJAX_RL_TRACEBACK=1 the whole traceback."""
    import traceback

    if isinstance(err, SyntaxError) and err.filename:
        place = f"{err.filename}:{err.lineno}"
    else:
        frames = traceback.extract_tb(err.__traceback__)
        place = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "unknown"
    if os.environ.get(TRACEBACK_ENV) == "1":
        return f" (at {place})\n" + "".join(traceback.format_exception(err)).rstrip()
    return f" (at {place}; {TRACEBACK_ENV}=1 shows the traceback)"


class Namespace(collections.namedtuple("Namespace", "prefix placeholder whose resolve")):
    """Names `prefix<placeholder>` (`brax:<name>`) that another library (`whose`: "Brax's") holds: never
    registered or listed, resolved by `resolve(name)` to an object when first asked for, and refused
    to `register`."""

    __slots__ = ()


_REGISTRIES: list = []


def registries() -> tuple:
    """Every `Registry` made (the algorithms', aggregation rules' and environments' once their packages
    are imported), in the order of GROUPS."""
    return tuple(sorted(_REGISTRIES, key=lambda r: GROUPS.index(r.group) if r.group in GROUPS else len(GROUPS)))


NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")
NAME_RULE = "lower_snake_case (a letter, then letters, digits or _)"
BUILT_IN = "fedjax_rl"


class Registry:
    """Named objects of one kind (`cls`, each with a `name`): the library's own, registered at import
    (origin BUILT_IN), a user's registered by `register` from their code, and the installed plugins of
    the entry-point `group`, each loaded and registered when its name is first asked for (`get`).
    `setting`: the setting that names one ("algo"), for error messages. `check(obj, origin)`: raises a
    ValueError for an object that cannot serve (an agent class missing a method of its protocol).
    `namespaces`: the `Namespace`s whose names `get` resolves."""

    def __init__(self, kind: str, group: str, cls: type, setting: str,
                 check: collections.abc.Callable[[object, str], None] | None = None,
                 pattern: re.Pattern = NAME_PATTERN, rule: str = NAME_RULE, namespaces: tuple = ()):
        self.kind, self.group, self.cls, self.setting, self.check = kind, group, cls, setting, check
        self.pattern, self.rule, self.namespaces = pattern, rule, tuple(namespaces)
        self.entries: dict[str, object] = {}
        self.origins: dict[str, str] = {}
        self._warned: set[str] = set()  # taken names a plugin also claims, said once each
        self._resolved: dict[str, object] = {}  # namespaced names asked for, once each
        _REGISTRIES.append(self)

    def register(self, obj, origin: str = "user code"):
        """Add `obj` under its name and return it. A ValueError naming `origin` for an object of another
        type, a name that is not lower_snake_case or that another object already has, or one `check` refuses."""
        if not isinstance(obj, self.cls):
            raise ValueError(f"{origin}: a {self.kind} is a {self.cls.__module__}.{self.cls.__qualname__}, "
                             f"got {type(obj).__name__}")
        name = obj.name
        for space in self.namespaces:
            if isinstance(name, str) and name.startswith(space.prefix):
                raise ValueError(f"{origin}: {self.kind} names starting with {space.prefix!r} are {space.whose}; "
                                 "choose another name")
        if not isinstance(name, str) or not self.pattern.fullmatch(name):
            raise ValueError(f"{origin}: a {self.kind} name is {self.rule}, got {name!r}")
        if name in self.entries and self.entries[name] != obj:
            raise ValueError(f"{origin}: the {self.kind} name {name!r} is already taken (by {self.origins[name]}); "
                             "register it under another name")
        if self.check is not None:
            self.check(obj, origin)
        self.entries[name] = obj
        self.origins.setdefault(name, origin)
        return obj

    def built_in(self) -> tuple[str, ...]:
        """The names fedjax_rl itself registers, in its order."""
        return tuple(name for name, origin in self.origins.items() if origin == BUILT_IN)

    def names(self) -> tuple[str, ...]:
        """Every name, sorted: the registered ones and the installed plugins' (none imported)."""
        return tuple(sorted({*self.entries, *installed(self.group)}))

    def known(self, name: str) -> bool:
        """Whether `name` is registered or an installed plugin's (nothing imported)."""
        return name in self.entries or name in installed(self.group)

    def get(self, name: str):
        """The object `name`: a registered one, a namespace's (`Namespace.resolve`, once per name), else
        the installed plugin of that name, loaded and registered (a PluginError naming the plugin if it
        cannot be); a ValueError listing the names if there is none. An installed plugin that claims a registered object's name is not used, and
        said so (once) wherever the name is asked for."""
        if name in self.entries:
            self._warn_if_shadowed(name)
            return self.entries[name]
        space = next((space for space in self.namespaces if name.startswith(space.prefix)), None)
        if space is not None:
            if name not in self._resolved:
                self._resolved[name] = space.resolve(name)
            return self._resolved[name]
        entry_point = installed(self.group).get(name)
        if entry_point is None:
            raise ValueError(self._unknown(name))
        return self.load(entry_point)

    def _unknown(self, name: str) -> str:
        if not self.namespaces:
            return f"{self.setting} must be one of {list(self.names())}, got {name!r}"
        listed = dict.fromkeys((*self.built_in(), *self.names()))  # the library's in its order, then the rest
        spaces = "".join(f", or {space.prefix}{space.placeholder} for {space.whose}" for space in self.namespaces)
        return f"unknown {self.kind} {name!r}; allowed: {', '.join(listed)}{spaces}"

    def _warn_if_shadowed(self, name: str) -> None:
        entry_point = installed(self.group).get(name)
        if entry_point is None or self.origins[name] == entry_point.describe() or name in self._warned:
            return
        self._warned.add(name)
        import warnings

        warnings.warn(f"{entry_point.describe()} is not used: the {self.kind} name {name!r} is already taken (by "
                      f"{self.origins[name]}); {self.setting} {name} is {self.origins[name]}'s. Rename the plugin's "
                      "entry point to use it", UserWarning, stacklevel=3)

    def load(self, entry_point: EntryPoint):
        """Import the plugin `entry_point` names and register its object under the entry point's name."""
        obj = load(entry_point)
        if isinstance(obj, self.cls) and obj.name != entry_point.name:
            raise PluginError(f"{entry_point.describe()} names the {self.kind} {obj.name!r}: an entry point's "
                              f"name and its {self.kind}'s must be the same")
        try:
            return self.register(obj, entry_point.describe())
        except ValueError as err:
            raise PluginError(str(err)) from None

    def load_plugins(self) -> dict[str, str]:
        """Load every installed plugin of the group: {name: "ok", or why it is not used}. A plugin
        whose name another object already has is reported as taken and not imported."""
        report = {}
        for name, entry_point in sorted(installed(self.group).items()):
            if name in self.entries and self.origins[name] != entry_point.describe():
                report[name] = (f"{entry_point.describe()}: the {self.kind} name {name!r} is already taken (by "
                                f"{self.origins[name]}); the plugin is not used")
                continue
            try:
                self.load(entry_point)
                report[name] = "ok"
            except PluginError as err:
                report[name] = str(err)
        return report
