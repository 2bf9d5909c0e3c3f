"""One declaration per setting: its default, its allowed range, and whether it is a vmappable leaf.

A `Setting` is declared once. From a tuple of them come

  * a frozen, hashable config dataclass (`config_class`): one field per setting, with its default;
  * the validation (`validate`): a ValueError naming the setting and its allowed range, raised
    before anything compiles ("omega must be in [0, 1), got 1.5");
  * the numeric hyperparameters passed to the compiled program as pytree leaves (`Hyperparams`), so a
    sweep over them is a `vmap` (settings declared with `leaf=True`; an agent's config makes them,
    `config.hparams()`, in `fedjax_rl.agents.robust`, which knows the `*Avg` baselines have no omega);
  * the command line: `--set KEY=VALUE` parses VALUE with the setting's type (`parse`), and a
    dedicated flag, where there is one, is spelled as the config name (`--sync-every` for
    `sync_every`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax

Check = Callable[[Any], "str | None"]  # value -> the allowed range, when the value is outside it


@dataclasses.dataclass(frozen=True)
class Setting:
    """name: config field and CLI name. default: its value unless a task or algorithm default
    overrides it. check: value -> None, or the phrase the error message ends with ("must be > 0").
    leaf: a numeric hyperparameter carried as a traced pytree leaf (vmappable), else static.
    kind: int, float, bool, str, "ints" (tuple of ints) or "strs", for parsing command-line text, or a
    function of the text (its `expects` attribute, if any, says what it reads in an error message).
    source: where the default comes from (paper, RL-Zoo3, SB3, ...). label: the name error
    messages use, when it says more than the field name ("num_agents (K)"). identity: part of what a
    run directory records as its run; False for a setting that changes no number (float rounding at
    most) and so is left out, so that a run resumes and reads back with either value (`cpu_dots`,
    `tensorboard`)."""

    name: str
    default: Any
    check: Check | None = None
    leaf: bool = False
    kind: Any = float
    help: str = ""
    source: str = ""
    label: str = ""
    identity: bool = True

    def validate(self, value) -> None:
        if self.check is None:
            return
        problem = self.check(value)
        if problem:
            shown = repr(value) if isinstance(value, str) else value
            raise ValueError(f"{self.label or self.name} {problem}, got {shown}")

    def with_default(self, default, source: str = "") -> "Setting":
        """The same setting with another default (an algorithm's or a task's)."""
        return dataclasses.replace(self, default=default, source=source or self.source)

    def parse(self, text: str):
        """Command-line text -> a value of this setting's kind."""
        try:
            if self.kind == "ints":
                return tuple(int(t) for t in text.split(",") if t)
            if self.kind == "strs":
                return tuple(t for t in text.split(",") if t)
            if self.kind is bool:
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(text)
                return text.lower() in ("true", "1")
            if self.kind is int:
                value = float(text)
                if value != int(value):
                    raise ValueError(text)
                return int(value)
            return self.kind(text)
        except ValueError:
            kind = {"ints": "comma-separated integers", "strs": "comma-separated names"}.get(
                self.kind, getattr(self.kind, "expects", None) or getattr(self.kind, "__name__", str(self.kind)))
            raise ValueError(f"{self.name} expects {kind}, got {text!r}") from None

    def text(self, value) -> str:
        """A value of this setting as the command-line text `parse` reads back to it (a float by its
        shortest exact decimal); raises a ValueError for a value the command line cannot spell (None)."""
        if value is None:
            raise ValueError(f"{self.name}=None has no command-line spelling (leave the setting out for its default)")
        if self.kind in ("ints", "strs"):
            return ",".join(str(v) for v in value)
        if self.kind is bool:
            return "true" if value else "false"
        return repr(float(value)) if self.kind is float else str(value)


# -- range checks (the phrase each returns is the end of the error message) ----------------------


def interval(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Check:
    """A check that a value lies in [low, high], each end open on request."""
    text = f"must be in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def check(value):
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        return None if (above and below) else text

    return check


def at_least(low) -> Check:
    """A check that a value is >= `low`."""
    return lambda value: None if value >= low else f"must be >= {low}"


def positive(value) -> str | None:
    """Check that a value is > 0: None if it is, else the allowed range."""
    return None if value > 0 else "must be > 0"


def positive_sizes(value) -> str | None:
    """Check that a tuple of sizes is non-empty and each is >= 1: None if so, else the allowed range."""
    return None if value and min(value) >= 1 else "must be positive"


def one_of(*allowed) -> Check:
    """A check that a value is one of `allowed`."""
    return lambda value: None if value in allowed else f"must be one of {list(allowed)}"


# -- config classes ---------------------------------------------------------------------------------


class SettingsConfig:
    """Methods of every config class made by `config_class`."""

    SETTINGS: tuple[Setting, ...] = ()

    def validate(self) -> None:
        """Every declared range, then the class's cross-setting checks (`check_together`)."""
        for setting in self.SETTINGS:
            setting.validate(getattr(self, setting.name))
        self.check_together()

    def check_together(self) -> None:
        pass

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


def config_class(name: str, settings: tuple[Setting, ...], base: type = SettingsConfig, doc: str = ""):
    """A frozen dataclass with one field per setting (in declaration order) and its default."""
    names = [s.name for s in settings]
    if len(set(names)) != len(names):
        raise ValueError(f"{name}: a setting is declared twice in {names}")
    fields = [(s.name, Any, dataclasses.field(default=s.default)) for s in settings]
    cls = dataclasses.make_dataclass(name, fields, bases=(base,), frozen=True, namespace={"SETTINGS": tuple(settings)})
    lines = [doc.strip(), "", "Settings (name = default: range; source):"] if doc else ["Settings:"]
    for s in settings:
        lines.append(f"    {s.name} = {s.default!r}{' [leaf]' if s.leaf else ''}  {s.help} {s.source}".rstrip())
    cls.__doc__ = "\n".join(lines)
    return cls


def by_name(settings: tuple[Setting, ...]) -> dict[str, Setting]:
    """The settings keyed by name."""
    return {s.name: s for s in settings}


def amend(settings: tuple[Setting, ...], *changed: Setting, drop: tuple[str, ...] = (),
          add: tuple[Setting, ...] = ()) -> tuple[Setting, ...]:
    """Another algorithm's declarations built on `settings`: each of `changed` replaces the setting of
    its name where it stands (a variant's defaults: TD3's twin critics), the names in `drop` go, and
    `add` follows at the end. A changed or dropped name that `settings` lacks raises a ValueError."""
    names = {s.name for s in settings}
    unknown = sorted({s.name for s in changed} - names | set(drop) - names)
    if unknown:
        raise ValueError(f"amend: {unknown} are not among the settings {sorted(names)}")
    replaced = by_name(changed)
    kept = tuple(replaced.get(s.name, s) for s in settings if s.name not in drop)
    return kept + tuple(add)


def parse_pairs(settings: tuple[Setting, ...], pairs, what: str, flag: str = "--set") -> dict:
    """NAME=VALUE texts (a command line's repeated `flag`) parsed by the declarations `settings`:
    {name: value}. Text without "=", or a name not declared, raises a ValueError naming `flag`, `what`
    and the allowed names, before anything compiles."""
    declared = by_name(settings)
    given = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"{flag} expects NAME=VALUE, got {pair!r}")
        name, text = pair.split("=", 1)
        given[name] = text
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ValueError(f"unknown {what} {unknown} for {flag}; allowed: {sorted(declared)}")
    return {name: declared[name].parse(text) for name, text in given.items()}


# -- traced hyperparameters ---------------------------------------------------------------------------


@jax.tree_util.register_pytree_node_class
class Hyperparams:
    """Numeric hyperparameters as pytree leaves (attribute access by name), so a sweep over them is a
    vmap. `replace` accepts only the names this algorithm has; another name raises a ValueError
    (before anything compiles), e.g. `omega` for DQNAvg, which has no robustness term."""

    def __init__(self, values: dict, owner: str = "this agent"):
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_owner", owner)

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        raise AttributeError("Hyperparams are immutable; use .replace(name=value)")

    def names(self) -> tuple[str, ...]:
        return tuple(self._values)

    def replace(self, **changes) -> "Hyperparams":
        unknown = sorted(set(changes) - set(self._values))
        if unknown:
            raise ValueError(
                f"{self._owner} has no hyperparameter {', '.join(map(repr, unknown))}; "
                f"its vmappable hyperparameters: {', '.join(self._values)}"
            )
        return Hyperparams({**self._values, **changes}, self._owner)

    def tree_flatten(self):
        return tuple(self._values.values()), (tuple(self._values), self._owner)

    @classmethod
    def tree_unflatten(cls, aux, children):
        names, owner = aux
        return cls(dict(zip(names, children)), owner)

    def __repr__(self):
        return f"Hyperparams({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"
