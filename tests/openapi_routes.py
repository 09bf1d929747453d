#!/usr/bin/env python3
"""openapi_routes.py - docs/openapi.yaml documents exactly the routes shardqd
serves, read off the daemon's source rather than written down twice:

1. Every route of the daemon (each route_def initializer in src/daemon/*.c:
   the routes[] table of server.c and GET /v1/jobs/{id}) is an operation of
   docs/openapi.yaml, with the same method and path.
2. Every operation of docs/openapi.yaml is a route the daemon serves.
3. Scopes: a route that needs no token has `security: []`; any other route
   does not, and its operation's tags are exactly its scopes (worker,
   producer, admin).

The YAML is read with a regex on its lines (paths at two spaces under
`paths:`, methods at four, tags and security at six), so this needs
nothing but Python's standard library; where PyYAML is installed, the file
is also parsed with it and both readings must agree.

Usage: openapi_routes.py SOURCE_DIR
"""
import glob
import os
import re
import sys

METHODS = ("get", "post", "put", "delete", "patch", "head", "options", "trace")
SCOPE_NAMES = {"SQ_SCOPE_WORKER": "worker", "SQ_SCOPE_PRODUCER": "producer",
               "SQ_SCOPE_ADMIN": "admin"}

# {"/v1/jobs", EVHTTP_REQ_GET, R_LIST, A}: path, method, route, scopes
ROUTE_RE = re.compile(r'\{\s*"(/[^"]*)"\s*,\s*EVHTTP_REQ_([A-Z]+)\s*,\s*(R_[A-Z0-9_]+)\s*,'
                      r'\s*([^{}]*?)\s*\}')
DEFINE_RE = re.compile(r'^#define\s+(\w+)\s+(SQ_SCOPE_\w+)\s*$', re.M)


def served(source):
    """{(METHOD, path): set of scope names} of every route_def in src/daemon."""
    routes, problems = {}, []
    files = sorted(glob.glob(os.path.join(source, "src", "daemon", "*.c")))
    for path in files:
        text = open(path, encoding="utf-8").read()
        alias = dict(DEFINE_RE.findall(text))  # W -> SQ_SCOPE_WORKER, ...
        for m in ROUTE_RE.finditer(text):
            url, method, route, scopes = m.groups()
            names = set()
            for tok in re.split(r"\s*\|\s*", scopes.strip()):
                tok = alias.get(tok, tok)
                if tok == "0":
                    continue
                if tok not in SCOPE_NAMES:
                    problems.append("%s: route %s %s: scope '%s' is not one this check "
                                    "knows (%s)" % (os.path.relpath(path, source), method,
                                                    url, tok, ", ".join(SCOPE_NAMES)))
                    continue
                names.add(SCOPE_NAMES[tok])
            key = (method, url)
            if key in routes:
                problems.append("route %s %s is in the source twice" % key)
            routes[key] = names
    if not routes:
        problems.append("no route found in %s: the route table's form changed; fix "
                        "ROUTE_RE in %s" % (os.path.join(source, "src", "daemon", "*.c"),
                                            __file__))
    return routes, problems


def documented(yaml_path):
    """{(METHOD, path): {"tags": set, "open": bool}} read from the lines of
    the paths section (open: the operation has `security: []`)."""
    ops, problems = {}, []
    in_paths, path, op = False, None, None
    for n, line in enumerate(open(yaml_path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if re.match(r"^\S", line):
            in_paths = line.startswith("paths:")
            path = op = None
            continue
        if not in_paths:
            continue
        m = re.match(r"^  (/\S*):\s*$", line)
        if m:
            path, op = m.group(1), None
            continue
        if re.match(r"^  \S", line) and not line.lstrip().startswith("#"):
            problems.append("%s:%d: a key under paths: that is not a path: %s"
                            % (yaml_path, n, line.strip()))
            path = op = None
            continue
        m = re.match(r"^    (\w+):\s*$", line)
        if m and path:
            op = None
            if m.group(1) in METHODS:
                key = (m.group(1).upper(), path)
                if key in ops:
                    problems.append("%s:%d: %s %s documented twice" % ((yaml_path, n) + key))
                op = ops[key] = {"tags": set(), "open": False}
            continue
        if op is None:
            continue
        m = re.match(r"^      tags:\s*\[(.*)\]\s*$", line)
        if m:
            op["tags"] = {t.strip() for t in m.group(1).split(",") if t.strip()}
        if re.match(r"^      security:\s*\[\s*\]\s*$", line):
            op["open"] = True
    return ops, problems


def yaml_agrees(yaml_path, ops):
    """With PyYAML: the problems where its reading differs from the regex's."""
    try:
        import yaml
    except ImportError:
        return []
    try:
        doc = yaml.safe_load(open(yaml_path, encoding="utf-8"))
    except yaml.YAMLError as e:
        return ["%s is not valid YAML: %s" % (yaml_path, e)]
    theirs = {}
    for path, item in (doc.get("paths") or {}).items():
        for method, op in (item or {}).items():
            if method in METHODS:
                theirs[(method.upper(), path)] = {
                    "tags": set(op.get("tags") or []),
                    "open": op.get("security") == []}
    if theirs == ops:
        return []
    return ["PyYAML and this check's line reading disagree about %s (write paths, "
            "methods, tags and security in the file's usual block style): yaml %s, "
            "lines %s" % (yaml_path, sorted(theirs.items()), sorted(ops.items()))]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    source = sys.argv[1]
    yaml_path = os.path.join(source, "docs", "openapi.yaml")
    if not os.path.isfile(yaml_path):
        sys.exit("openapi_routes: no %s (give the source directory)" % yaml_path)
    routes, problems = served(source)
    ops, more = documented(yaml_path)
    problems += more + yaml_agrees(yaml_path, ops)
    for key in sorted(set(routes) - set(ops)):
        problems.append("%s %s is served by shardqd (src/daemon) but missing from "
                        "docs/openapi.yaml" % key)
    for key in sorted(set(ops) - set(routes)):
        problems.append("%s %s is in docs/openapi.yaml but shardqd does not serve it" % key)
    for key in sorted(set(routes) & set(ops)):
        scopes, op = routes[key], ops[key]
        if not scopes and not op["open"]:
            problems.append("%s %s needs no token, but docs/openapi.yaml does not give it "
                            "`security: []`" % key)
        elif scopes and op["open"]:
            problems.append("%s %s needs a token of scope %s, but docs/openapi.yaml gives it "
                            "`security: []`" % (key + (" or ".join(sorted(scopes)),)))
        elif scopes and op["tags"] != scopes:
            problems.append("%s %s takes the scopes %s, but its tags in docs/openapi.yaml are "
                            "%s" % (key + (sorted(scopes), sorted(op["tags"]))))
    for p in problems:
        print("openapi_routes: " + p, file=sys.stderr)
    if problems:
        return 1
    print("openapi_routes: %d routes of shardqd (%d paths), each documented in "
          "docs/openapi.yaml with its scopes, and nothing more"
          % (len(routes), len({p for _, p in routes})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
