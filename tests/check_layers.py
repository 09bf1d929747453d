#!/usr/bin/env python3
"""check_layers.py - the dependency rules of docs/architecture.md, read off
the build rather than written down twice:

1. No cycle between the files of the library, nor between the files of one
   program: file A depends on file B when A's object file uses a symbol that
   B's defines (nm). A cycle is printed with the symbols on each edge.
2. A program (CLI, daemon, bench) reaches the library only through the public
   header, the leaf utilities and the internal header named for it: every
   header its objects were compiled with (the compiler's .d files) and every
   library symbol they use must come from those.

Usage: check_layers.py BUILD_DIR SOURCE_DIR
"""
import os
import subprocess
import sys

# The library's headers a program may include besides include/shardq.h:
# the leaf utilities (any program), and the one internal header of shardqd.
UTIL_HEADERS = {"src/buf.h", "src/json.h", "src/clock.h"}
PROGRAMS = {
    # name: (object directory under the build, its own source dirs, extra headers)
    "shardq (CLI)": ("CMakeFiles/shardq-cli.dir", ["src/cli"], set()),
    "shardqd": ("CMakeFiles/shardqd.dir", ["src/daemon"], {"src/router_internal.h"}),
    "shardq-bench": ("bench/CMakeFiles/shardq-bench.dir", ["bench"], set()),
}
LIBRARY_DIRS = ["CMakeFiles/shardq_objects.dir", "CMakeFiles/shardq_util.dir"]


def objects_under(build, rel):
    """The object files of a target whose source still exists (a file
    removed from the tree leaves its object behind in an old build)."""
    out = []
    for root, _, files in os.walk(os.path.join(build, rel)):
        for f in files:
            obj = os.path.join(root, f)
            src = source_name(build, obj)
            if f.endswith(".o") and (os.path.exists(os.path.join(SOURCE, src))
                                     or os.path.exists(os.path.join(build, src))):
                out.append(obj)
    return sorted(out)


def symbols(obj):
    """(defined, undefined) global symbol names of an object file."""
    text = subprocess.run(["nm", "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind in "TDBRCVW":
            defined.add(name)
    return defined, undefined


def source_name(build, obj):
    """src/worker.c for BUILD/CMakeFiles/shardq_objects.dir/src/worker.c.o,
    bench/main.c for BUILD/bench/CMakeFiles/shardq-bench.dir/main.c.o"""
    rel = os.path.relpath(obj[:-2], build)
    sub, _, rest = rel.partition("CMakeFiles/")
    _, _, path = rest.partition(".dir/")
    return sub + path


def graph(build, objs):
    """file -> {file: [symbols]} over the given objects."""
    info = {source_name(build, o): symbols(o) for o in objs}
    owner = {}
    for f, (defined, _) in info.items():
        for s in defined:
            owner[s] = f
    edges = {f: {} for f in info}
    for f, (_, undefined) in info.items():
        for s in sorted(undefined):
            g = owner.get(s)
            if g and g != f:
                edges[f].setdefault(g, []).append(s)
    return info, edges


def cycles(edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def report_cycles(what, edges):
    bad = cycles(edges)
    for comp in bad:
        print(f"check_layers: a dependency cycle in {what} between {', '.join(comp)}:")
        for f in comp:
            for g, syms in sorted(edges[f].items()):
                if g in comp:
                    shown = ", ".join(syms[:4]) + (" ..." if len(syms) > 4 else "")
                    print(f"    {f} -> {g} ({shown})")
    return len(bad)


def headers_of(obj, source):
    dep = obj + ".d"
    if not os.path.exists(dep):
        return None
    text = open(dep).read().replace("\\\n", " ")
    _, _, rest = text.partition(":")
    out = set()
    for path in rest.split():
        path = os.path.realpath(path)
        if path.startswith(source + "/"):
            out.add(os.path.relpath(path, source))
    return out


def check_program(name, objdir, own_dirs, extra, build, source, lib_defined, util_defined,
                  exported):
    objs = objects_under(build, objdir)
    if not objs:
        print(f"check_layers: no object files of {name} under {objdir}; build it first")
        return 1
    errors = 0
    allowed_headers = {"include/shardq.h"} | UTIL_HEADERS | extra
    info, edges = graph(build, objs)
    errors += report_cycles(name, edges)
    own_defined = set().union(*(d for d, _ in info.values()))
    allowed_internal = set()
    for h in extra:
        allowed_internal |= declared_in(os.path.join(source, h), lib_defined)
    for obj in objs:
        src = source_name(build, obj)
        hdrs = headers_of(obj, source)
        if hdrs is None:
            print(f"check_layers: {obj}.d is missing: the build must write dependency files")
            return errors + 1
        for h in sorted(hdrs):
            if h.endswith(".c") or any(h.startswith(d + "/") for d in own_dirs):
                continue
            if h not in allowed_headers:
                print(f"check_layers: {name}: {src} includes the private header {h}; use "
                      f"include/shardq.h (add a documented public call) or one of "
                      f"{', '.join(sorted(allowed_headers - {'include/shardq.h'}))}")
                errors += 1
        _, undefined = info[src]
        for s in sorted(undefined):
            if s in own_defined or s not in lib_defined:
                continue
            if s in exported or s in util_defined or s in allowed_internal:
                continue
            print(f"check_layers: {name}: {src} calls {s}, a private function of the library")
            errors += 1
    return errors


def declared_in(header, lib_defined):
    """The library's functions a header names (for an internal header)."""
    if not os.path.exists(header):
        return set()
    text = open(header).read()
    return {s for s in lib_defined if s + "(" in text.replace(" (", "(")}


SOURCE = "."


def main():
    global SOURCE
    build, source = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
    SOURCE = source
    lib_objs = []
    for d in LIBRARY_DIRS:
        lib_objs += objects_under(build, d)
    if not lib_objs:
        print("check_layers: no library object files found; build first")
        return 1
    info, edges = graph(build, lib_objs)
    errors = report_cycles("the library", edges)
    lib_defined = set().union(*(d for d, _ in info.values()))
    util_objs = objects_under(build, "CMakeFiles/shardq_util.dir")
    util_defined = set().union(*(symbols(o)[0] for o in util_objs))
    so = os.path.join(build, "libshardq.so")
    dyn = subprocess.run(["nm", "-D", "--defined-only", so], check=True, capture_output=True,
                         text=True).stdout
    exported = {line.split()[-1].split("@")[0] for line in dyn.splitlines() if line.strip()}
    for name, (objdir, own, extra) in PROGRAMS.items():
        errors += check_program(name, objdir, own, extra, build, source, lib_defined,
                                util_defined, exported)
    if errors:
        print(f"check_layers: {errors} violation(s) of the layering (docs/architecture.md)")
        return 1
    print(f"check_layers: {len(info)} library files and {len(PROGRAMS)} programs: "
          "no cycle, no private header or call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
