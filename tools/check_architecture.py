"""Checks the package's shape: the import graph (every import statement, those inside
functions included), the tiers, and module sizes.

    python tools/check_architecture.py          # prints the graph summary; exit 1 on a violation

Rules (docs/ARCHITECTURE.md):
- a module imports only from its own tier or a lower one (TIERS below, bottom first);
- no import cycle among modules, counting the package `__init__`s a module's import runs
  first (an edge from each module to its parent packages); a cycle that stays inside a
  package whose `__init__` is on it is that package importing its own children in the
  order it chooses, and only the rest of such a cycle counts;
- at most MAX_ROOT_MODULES modules directly in realformer_tf/, none over MAX_LINES lines;
- no Python file of the repository touches absl's global FLAGS (state lives in the
  program's own FlagValues, so every program runs in-process any number of times).
"""

import ast
import collections
import os
import sys

PACKAGE = "realformer_tf"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PACKAGE)
MAX_ROOT_MODULES = 8
MAX_LINES = 450

# Bottom first. A module's tier is that of the longest prefix listed. The root facades
# (`modeling`, `optimization`, `etc_modeling`) and the package itself re-export, so they
# sit on top.
TIERS = [
    ("base", ["errors", "fileio"]),
    ("kernels", ["kernels"]),
    ("data", ["data"]),
    ("layers", ["layers"]),
    ("models", ["models"]),
    ("checkpoints", ["checkpoints"]),
    ("compat", ["compat"]),
    ("families", ["families"]),
    ("training", ["training"]),
    ("serving", ["serving"]),
    ("analysis", ["analysis"]),
    ("jobs", ["jobs"]),
    ("app", ["app"]),
    ("facades", ["", "modeling", "optimization", "etc_modeling"]),
]
TIER_OF = {prefix: rank for rank, (_, prefixes) in enumerate(TIERS) for prefix in prefixes}


def modules():
    """{dotted name relative to the package ('' for __init__): path}."""
    found = {}
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
                found[rel[: -len(".__init__")] if rel.endswith("__init__") else ("" if rel == "__init__" else rel)] = os.path.join(folder, name)
    return found


def tier(module):
    parts = module.split(".") if module else [""]
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in TIER_OF:
            return TIER_OF[prefix]
    raise KeyError(f"{PACKAGE}.{module} is in no tier of tools/check_architecture.py TIERS")


def imports(path, known):
    """The package modules that the file at `path` imports, by any import statement."""
    tree = ast.parse(open(path).read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from a.b import c`: module a.b.c when c is one, else (a name in) a.b
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                rel = name[len(PACKAGE) + 1:]
                # the longest known module the name denotes (x.y.z -> x.y when z is a name in x.y)
                while rel not in known and "." in rel:
                    rel = rel.rsplit(".", 1)[0]
                if rel in known:
                    found.add(rel)
    return found


def graph():
    """({module: path}, {module: the modules it imports, and the packages whose
    `__init__` its import runs first}."""
    known = modules()
    return known, {m: (imports(p, known) | (parents(m) & set(known))) - {m} for m, p in known.items()}


def parents(module):
    """The packages whose __init__ runs when `module` is imported."""
    parts = module.split(".")
    return {".".join(parts[:n]) for n in range(1, len(parts))} | {""}


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop(); on.discard(w); component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def package_cycles(edges, known):
    """The import cycles that count: `cycles(edges)`, where a cycle inside the subtree
    of a package on it (the package's `__init__` importing its children, each of which
    runs that `__init__` first) is looked at again without that package."""
    found = []
    for component in cycles(edges):
        packages = [p for p in component if _is_package(p, known)
                    and all(m == p or p == "" or m.startswith(p + ".") for m in component)]
        if not packages:
            found.append(component)
            continue
        outer = min(packages, key=len)
        rest = {m: {t for t in edges[m] if t in component and t != outer} for m in component if m != outer}
        found.extend(package_cycles(rest, known))
    return found


def _is_package(module, known):
    return module == "" or os.path.basename(known.get(module, "")) == "__init__.py"


SKIPPED_FOLDERS = {".git", ".venv", "build", "dist", "__pycache__", "node_modules"}


def repository_python_files(top=os.path.dirname(ROOT)):
    for folder, subfolders, files in os.walk(top):
        subfolders[:] = [d for d in subfolders if d not in SKIPPED_FOLDERS and not d.endswith(".egg-info")]
        yield from (os.path.join(folder, name) for name in sorted(files) if name.endswith(".py"))


def global_flag_uses(path):
    """Lines of `path` that use absl's global FLAGS: `flags.FLAGS`, or a
    `flags.DEFINE_*` / `flags.mark_flag*` call without `flag_values=`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "FLAGS" and getattr(node.value, "id", "") == "flags":
            found.append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and getattr(node.func.value, "id", "") == "flags"
              and node.func.attr.startswith(("DEFINE", "mark_flag"))
              and not any(k.arg == "flag_values" for k in node.keywords)):
            found.append(node.lineno)
    return sorted(found)


def violations():
    """Lines describing every rule broken (empty: the shape is as documented)."""
    known, edges = graph()
    problems = []
    for component in package_cycles(edges, known):
        problems.append("import cycle: " + " -> ".join(f"{PACKAGE}.{m}" if m else PACKAGE for m in component))
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if target in parents(module):
                continue  # importing from one's own package: allowed (same code unit)
            if tier(target) > tier(module):
                problems.append(f"upward import: {PACKAGE}.{module} ({TIERS[tier(module)][0]}) imports "
                                f"{PACKAGE}.{target} ({TIERS[tier(target)][0]})")
    root = sorted(m for m in known if m and "." not in m and os.path.basename(known[m]) != "__init__.py")
    if len(root) > MAX_ROOT_MODULES:
        problems.append(f"{len(root)} modules directly in {PACKAGE}/ (at most {MAX_ROOT_MODULES}): {', '.join(root)}")
    for module, path in sorted(known.items()):
        lines = sum(1 for _ in open(path))
        if lines > MAX_LINES:
            problems.append(f"{os.path.relpath(path, os.path.dirname(ROOT))}: {lines} lines (at most {MAX_LINES})")
    for path in repository_python_files():
        for line in global_flag_uses(path):
            problems.append(f"{os.path.relpath(path, os.path.dirname(ROOT))}:{line}: absl's global FLAGS (define "
                            f"the flags on the program's own FlagValues: flag_values=fv)")
    return problems


def summary():
    known, edges = graph()
    by_tier = collections.Counter(TIERS[tier(m)][0] for m in known)
    n_edges = sum(len(t) for t in edges.values())
    return (f"{len(known)} modules, {n_edges} import edges, "
            + ", ".join(f"{name}: {by_tier[name]}" for name, _ in TIERS))


def main():
    print(summary())
    problems = violations()
    for line in problems:
        print(line)
    print(f"{len(problems)} violation(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
