#!/usr/bin/env python3
"""check_layers.py - keeps the include graph of the library layered.

usage: check_layers.py SRC_DIR [BUILD_DIR] [--list]

Reads every #include "..." of the library's sources (comm/, kernels/, topo/,
shard/, models/, include/), resolving each as the compiler would (the
including file's folder, then comm/, kernels/, topo/, include/), and, given
BUILD_DIR, which functions each object file of the library and the models
calls and defines (nm): a call from x.c to a function defined in y.c is an
edge x -> y just as an include is. It checks four rules:

  cycle      no two modules depend on each other, directly or around a
             longer loop (a module is a .c file with its own .h: x.c
             including x.h is no edge). Reported once per cycle, by its
             members.
  public     shard/ and models/ reach the library only through include/
             (sharc.h, sharc_shard.h) and their own folder's headers: the
             engine calls the public collectives, nothing below them.
  transport  only files in comm/transport/ include a transport's own
             headers (everything in comm/transport/ but transport.h): the
             rest of comm/ sees transports through their interface.
  call       (with BUILD_DIR) no file outside comm/transport/ calls a
             function defined there but the registry's
             (comm/transport/transport.c): transports are reached through
             the registry and the vtable, never by name.

Violations the code still has are listed beside this script, one per
line, in baseline.txt (with BUILD_DIR, for a build with CUDA and
libibverbs: other builds compile other files) or baseline-includes.txt
(sources only); the check fails on a violation not in the baseline
(a new knot) and on a baseline line that no longer occurs (a knot untied:
delete the line, so it cannot come back unnoticed). --list prints the
current violations in baseline form.

Exit status 0 clean, 1 a rule broken or the baseline stale, 2 bad usage.
"""
import os
import re
import subprocess
import sys

DIRS = ("comm", "kernels", "topo", "shard", "models", "include")
SEARCH = ("comm", "kernels", "topo", "include")
EXTS = (".c", ".h", ".cu", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def sources(src):
    out = []
    for d in DIRS:
        for dp, _, fs in os.walk(os.path.join(src, d)):
            out += [os.path.relpath(os.path.join(dp, f), src)
                    for f in fs if f.endswith(EXTS)]
    return sorted(out)


def resolve(src, frm, inc):
    for base in (os.path.dirname(frm),) + SEARCH:
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(src, p)):
            return p
    return None  # a system or generated header


def module(path):
    return os.path.splitext(path)[0]


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
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
    for v in sorted(set(edges) | {w for s in edges.values() for w in s}):
        if v not in index:
            visit(v)
    return out


def objects(build):
    """{source path: object path} of the library and the models."""
    out = {}
    for sub in ("CMakeFiles/sharc_obj.dir", "models/CMakeFiles/sharc_models.dir"):
        top = os.path.join(build, sub)
        for dp, _, fs in os.walk(top):
            for f in fs:
                if f.endswith(".o"):
                    rel = os.path.relpath(os.path.join(dp, f[:-2]), top)
                    if sub.startswith("models"):
                        rel = os.path.join("models", rel)
                    out[rel] = os.path.join(dp, f)
    return out


def symbols(obj):
    """(defined, undefined) global function and data names of one object."""
    res = subprocess.run(["nm", "-g", obj], capture_output=True, text=True,
                         check=True)
    defined, undefined = set(), set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] == "U":
            undefined.add(parts[-1])
        elif len(parts) == 3 and parts[1] in "TDBRVWGS":
            defined.add(parts[2])
    return defined, undefined


def call_edges(build):
    objs = objects(build)
    if not objs:
        sys.exit(f"check_layers: no object files under {build}/CMakeFiles/"
                 "sharc_obj.dir: build first")
    syms = {src: symbols(o) for src, o in objs.items()}
    owner = {}
    for src, (defined, _) in syms.items():
        for name in defined:
            owner.setdefault(name, src)
    return {(src, owner[name]) for src, (_, und) in syms.items()
            for name in und if name in owner and owner[name] != src}


def violations(src, build=None):
    edges, found = {}, set()
    tdir = os.path.join("comm", "transport") + os.sep
    iface = os.path.join(tdir, "transport.h")
    if build:
        for frm, to in call_edges(build):
            if module(frm) != module(to):
                edges.setdefault(module(frm), set()).add(module(to))
            if (to.startswith(tdir) and not frm.startswith(tdir) and
                    module(to) != module(iface)):
                found.add(f"call {frm} -> {to}")
    for f in sources(src):
        with open(os.path.join(src, f), errors="replace") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            to = resolve(src, f, inc)
            if to is None:
                continue
            if module(to) != module(f):
                edges.setdefault(module(f), set()).add(module(to))
            top = f.split(os.sep)[0]
            if top in ("shard", "models") and not (
                    to.startswith("include" + os.sep) or
                    os.path.dirname(to) == os.path.dirname(f)):
                found.add(f"public {f} -> {to}")
            if (to.startswith(tdir) and not f.startswith(tdir) and
                    to != iface):
                found.add(f"transport {f} -> {to}")
    for comp in cycles(edges):
        found.add("cycle " + " ".join(comp))
    return found


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    src = argv[0]
    rest = [a for a in argv[1:] if not a.startswith("-")]
    now = violations(src, rest[0] if rest else None)
    if "--list" in argv:
        print("\n".join(sorted(now)))
        return 0
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "baseline.txt" if rest else "baseline-includes.txt")
    with open(path) as fh:
        base = {l.strip() for l in fh if l.strip() and not l.startswith("#")}
    new, gone = sorted(now - base), sorted(base - now)
    for v in new:
        print(f"FAIL: new layering violation: {v}")
    for v in gone:
        print(f"FAIL: {os.path.basename(path)} lists '{v}', which no "
              "longer occurs: delete that line")
    known = len(now & base)
    print(f"layers: {len(now)} violations, {known} of them known in "
          f"{os.path.basename(path)}; {len(new)} new, {len(gone)} stale")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
