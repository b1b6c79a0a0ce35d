#!/usr/bin/env python3
"""Checks that the top-level modules of every crate import each other in one direction only.

For each crate (a directory with Cargo.toml and src/lib.rs or src/main.rs) the top-level modules
are the `mod x;` / `pub mod x;` declarations of its root file. A module's sources are `src/x.rs`
and everything under `src/x/`. A reference `crate::y` (in `use` or in a path) from module x to a
top-level module y != x is an edge x -> y; the crate root file itself is not a module. The check
fails, listing every cycle, when the graph has one (directly, x -> y -> x, or around a circle).

    python3 .ci/module-cycles.py            # every crate of the workspace
    python3 .ci/module-cycles.py --graph    # also print each crate's edges
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
CRATE_REF = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\}", re.S)
COMMENT = re.compile(r"//[^\n]*")


def crates():
    for toml in sorted(ROOT.glob("**/Cargo.toml")):
        if "target" in toml.parts or ".venv" in toml.parts:
            continue
        src = toml.parent / "src"
        for root in ("lib.rs", "main.rs"):
            if (src / root).exists():
                yield toml.parent.relative_to(ROOT), src, src / root
                break


def module_files(src: Path, name: str):
    f = src / f"{name}.rs"
    if f.exists():
        yield f
    d = src / name
    if d.is_dir():
        yield from sorted(d.rglob("*.rs"))


def edges_of(src: Path, root: Path):
    mods = MOD_DECL.findall(COMMENT.sub("", root.read_text()))
    edges = {m: set() for m in mods}
    for m in mods:
        for f in module_files(src, m):
            text = COMMENT.sub("", f.read_text())
            targets = set(CRATE_REF.findall(text))
            for group in USE_GROUP.findall(text):
                targets.update(re.findall(r"(?:^|[,{\s])([a-z_][a-z0-9_]*)\s*(?:::|[,}]|$)", group))
            edges[m].update(t for t in targets if t in edges and t != m)
    return edges


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    graph = "--graph" in sys.argv
    failed = False
    for crate, src, root in crates():
        edges = edges_of(src, root)
        if graph:
            print(f"{crate}:")
            for m in sorted(edges):
                print(f"  {m} -> {', '.join(sorted(edges[m])) or '-'}")
        for comp in cycles(edges):
            failed = True
            inner = {m: sorted(edges[m] & set(comp)) for m in comp}
            print(f"{crate}: modules import each other in a circle: " + "; ".join(f"{m} -> {', '.join(t)}" for m, t in inner.items()))
    if failed:
        sys.exit(1)
    print("no circular imports between the top-level modules of any crate")


if __name__ == "__main__":
    main()
