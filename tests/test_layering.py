"""The structure of `fedjax_rl`, read from the source (ast, nothing imported): no module imports
itself through others, function-level imports included (a lazy import hides a cycle, it does not
remove it); no room imports one on a higher floor, and the agents never import the loop; no
function is too long to read its steps, and no module too long to read its parts."""

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
    assert "fedjax_rl.experiment" in graph["fedjax_rl.cli"]  # imported inside cmd_train
    assert "fedjax_rl.agents.robust" in graph["fedjax_rl.agents.dqn"]  # from fedjax_rl.agents import robust


def test_fedjax_rl_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_agents_never_import_the_loop():
    graph = import_graph()
    loop = {"fedjax_rl.train", "fedjax_rl.experiment", "fedjax_rl.cli", "fedjax_rl.configs"}
    for module, targets in graph.items():
        if module.startswith("fedjax_rl.agents"):
            assert not targets & loop, f"{module} imports {sorted(targets & loop)}"


# The rooms (a top-level module, or a subpackage with everything in it) by floor, bottom first. A room
# imports rooms on its own floor or below, never above. A new module takes a place here.
FLOORS = (
    {"fedjax_rl", "checkpoint", "cli_flags", "distributed", "envs", "evaluate", "losses", "machine", "settings",
     "stats"},
    {"federated", "heterogeneity"},
    {"agents", "paper", "tabular"},
    {"configs", "plots", "reproduce_tables", "tensorboard_log"},
    {"reproduce_costs", "reproduce_heterogeneity", "reproduce_pieces", "reproduce_report", "run_directory", "train"},
    {"experiment", "render"},
    {"reproduce"},
    {"reproduce_executor"},
    {"cli"},
)


def _room(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def upward_imports(graph: dict[str, set[str]], floors=FLOORS) -> list[str]:
    """Every import from a room to one on a higher floor, as "module -> module"."""
    floor = {room: level for level, rooms in enumerate(floors) for room in rooms}
    return sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                  if floor[_room(target)] > floor[_room(module)])


def test_the_floor_check_sees_an_upward_import_and_allows_the_rest():
    floors = ({"fedjax_rl", "a"}, {"b", "c"})
    graph = {"fedjax_rl.b": {"fedjax_rl.a", "fedjax_rl.c.x"}, "fedjax_rl.c.x": {"fedjax_rl.c"}, "fedjax_rl.a": set()}
    assert upward_imports(graph, floors) == []
    graph["fedjax_rl.a"] = {"fedjax_rl.c.x"}
    assert upward_imports(graph, floors) == ["fedjax_rl.a -> fedjax_rl.c.x"]


def test_no_room_imports_one_on_a_higher_floor():
    graph = import_graph()
    unplaced = sorted({_room(m) for m in graph} - set().union(*FLOORS))
    assert not unplaced, f"rooms on no floor (add them to FLOORS): {unplaced}"
    upward = upward_imports(graph)
    assert not upward, "imports from a lower floor to a higher one: " + ", ".join(upward)


MAX_FUNCTION_LINES = 90
MAX_MODULE_LINES = {"experiment.py": 600, "run_directory.py": 600}


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


def test_the_run_and_its_directory_are_each_under_600_lines():
    for name, limit in MAX_MODULE_LINES.items():
        lines = len((PACKAGE / name).read_text().splitlines())
        assert lines < limit, f"fedjax_rl/{name} has {lines} lines (limit {limit})"
