"""The structure of `fedjax_rl`, read from the source (ast, nothing imported): no module imports
itself through others, function-level imports included (a lazy import hides a cycle, it does not
remove it); every module sits in a package by role and no package imports one above it; no module
uses another's private names; the agents never import the loop; no function is too long to read its
steps, and no module too long to read its parts unless it is listed, with its reason, in LONG_MODULES."""

import ast
import pathlib
import textwrap

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "fedjax_rl"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """`name` (a module, or an attribute of one) as the project module it loads."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """{module: the project modules it imports}, from every import statement anywhere in its source."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, `level - 1` packages up
                    base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
                # `from pkg import name`: the submodule pkg.name where there is one, else pkg itself
                names = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            targets |= {t for t in (_resolve(n, set(files)) for n in names) if t and t != module}
        graph[module] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_function_level_and_from_imports():
    graph = import_graph()
    assert "fedjax_rl.training.loop" in graph["fedjax_rl.cli.commands"]  # imported inside cmd_train
    assert "fedjax_rl.agents.robust" in graph["fedjax_rl.agents.dqn"]  # from fedjax_rl.agents import robust


def test_fedjax_rl_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_agents_never_import_the_loop():
    graph = import_graph()
    loop = {"fedjax_rl.training.program", "fedjax_rl.training.loop", "fedjax_rl.cli.commands", "fedjax_rl.training.configs"}
    for module, targets in graph.items():
        if module.startswith("fedjax_rl.agents"):
            assert not targets & loop, f"{module} imports {sorted(targets & loop)}"


# The packages by role, bottom first. A package imports its own modules and those of packages below it,
# never above; packages on one level (a tuple) import neither each other.
PACKAGE_ORDER = ("plugins", "envs", "core", ("agents", "tabular"), "training", "analysis", ("reproduce", "flower"), "cli")


def _package(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def upward_imports(graph: dict[str, set[str]], order=PACKAGE_ORDER) -> list[str]:
    """Every import from a package to one above it or beside it on its level, as "module -> module"."""
    level = {name: i for i, names in enumerate(order) for name in ((names,) if isinstance(names, str) else names)}
    return sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                  if _package(target) != _package(module) and level[_package(target)] >= level[_package(module)])


def test_the_order_check_sees_an_upward_import_and_allows_the_rest():
    order = ("a", ("b", "c"), "d")
    graph = {"fedjax_rl.d.x": {"fedjax_rl.a.y", "fedjax_rl.c.z", "fedjax_rl.d.w"}, "fedjax_rl.a.y": set()}
    assert upward_imports(graph, order) == []
    graph["fedjax_rl.b.v"] = {"fedjax_rl.c.z"}
    graph["fedjax_rl.a.y"] = {"fedjax_rl.d.x"}
    assert upward_imports(graph, order) == ["fedjax_rl.a.y -> fedjax_rl.d.x", "fedjax_rl.b.v -> fedjax_rl.c.z"]


def test_every_module_sits_in_a_package_in_order():
    graph = import_graph()
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not top, f"modules at the top level of fedjax_rl (put them in a package): {top}"
    placed = {name for names in PACKAGE_ORDER for name in ((names,) if isinstance(names, str) else names)}
    unplaced = sorted({_package(m) for m in graph if "." in m} - placed)
    assert not unplaced, f"packages missing from PACKAGE_ORDER: {unplaced}"
    upward = upward_imports(graph)
    assert not upward, "imports from a package to one above it or beside it: " + ", ".join(upward)


def private_uses(source: str, project_modules: set[str]) -> list[str]:
    """Underscore names of other project modules that `source` imports or reaches: `from m import _f`
    and `m._f` where `m` names a project module (dunders aside)."""
    tree, aliases, found = ast.parse(source), {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fedjax_rl"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in project_modules:
                    aliases[alias.asname or alias.name] = full
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in project_modules and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


def test_the_private_check_sees_both_forms():
    source = "from fedjax_rl.core import settings\nfrom fedjax_rl.core.losses import _huber\nsettings._check(1)\nsettings.ok()"
    assert private_uses(source, {"fedjax_rl.core.settings", "fedjax_rl.core.losses"}) == [
        "fedjax_rl.core.losses._huber", "fedjax_rl.core.settings._check"]


def test_no_module_uses_another_modules_private_names():
    modules = set(import_graph())
    found = {path.relative_to(PACKAGE).as_posix(): uses for path in sorted(PACKAGE.rglob("*.py"))
             if (uses := private_uses(path.read_text(), modules))}
    assert not found, f"private names used across modules: {found}"


MAX_FUNCTION_LINES = 90
MAX_MODULE_LINES = 600
# The modules allowed to be longer, each with why splitting it would not make it easier to read.
LONG_MODULES = {
    "envs/lunar_lander_physics.py": "Box2D's solver for one lander (bodies, terrain contacts, velocity and position "
                                    "iterations, time of impact, sleep), read line by line against Box2D 2.3's, "
                                    "whose steps splitting would scatter (docs/lunar_lander.md)",
}


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """(name, lines) of every function or method, nested ones included, longer than `limit` lines
    from its `def` to its last line."""
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit]


def test_the_length_check_counts_from_def_to_last_line():
    source = textwrap.dedent("""\
        @decorator
        def f():
            a = 1
            b = 2

            return a + b


        class C:
            def g(self):
                def h():
                    return 1
                return h
        """)
    assert long_functions(source, 3) == [("f", 5), ("g", 4)]
    assert long_functions(source, 5) == []


def test_no_function_is_longer_than_90_lines():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, lines in long_functions(path.read_text(), MAX_FUNCTION_LINES):
            found.append(f"{path.relative_to(PACKAGE)}:{name} ({lines} lines)")
    assert not found, f"functions longer than {MAX_FUNCTION_LINES} lines: " + ", ".join(found)


def test_no_module_is_longer_than_600_lines_unless_it_is_listed():
    """A longer module is named in LONG_MODULES with its reason; a listed one that no longer needs it goes."""
    found, lengths = [], {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        lengths[name] = len(path.read_text().splitlines())
        if lengths[name] > MAX_MODULE_LINES and name not in LONG_MODULES:
            found.append(f"{name} ({lengths[name]} lines)")
    assert not found, f"modules over {MAX_MODULE_LINES} lines not in LONG_MODULES: " + ", ".join(found)
    assert all(lengths.get(name, 0) > MAX_MODULE_LINES for name in LONG_MODULES), "listed modules now short enough"


# The run directory's own files: only `training/run_directory.py` names them (its helper
# `set_aside.py` moves whole runs and files it is handed, by no name).
RUN_FILE_NAMES = ("config.json", "metrics.json", "metrics.csv", "final.csv", "global_params.npz", "checkpoint.npz",
                  "finished.json", "failed.json")


def run_files_named(source: str) -> list[str]:
    """The run files a module's string constants name (a name inside a longer message counts only as a
    path's last part: "metrics.json" and ".../metrics.json", not "each metrics.json it wrote")."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            last = node.value.rsplit("/", 1)[-1]
            found += [name for name in RUN_FILE_NAMES if last == name]
    return found


def test_the_run_file_rule_sees_a_literal_name_and_passes_prose():
    assert run_files_named('open(os.path.join(d, "metrics.json"))') == ["metrics.json"]
    assert run_files_named('p = "runs/a/global_params.npz"') == ["global_params.npz"]
    assert run_files_named('"""reads metrics.json and config.json of a run"""') == []


def test_only_the_run_directory_names_a_run_file_and_there_is_one_load_run():
    """Every reader of runs goes through `RunDirectory` (its `read_config`, `read_metrics`,
    `read_parameters`, `point_name`, ...), so a file's name or layout changes in one module."""
    named, load_runs = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        source = path.read_text()
        if name != "training/run_directory.py":
            named += [f"{name}: {file}" for file in run_files_named(source)]
        load_runs += [name for node in ast.walk(ast.parse(source))
                      if isinstance(node, ast.FunctionDef) and node.name == "load_run"]
    assert not named, "run files named outside training/run_directory.py: " + ", ".join(named)
    assert load_runs == ["analysis/plots.py"], load_runs
