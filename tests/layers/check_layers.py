#!/usr/bin/env python3
"""check_layers.py - keeps the include graph of the library layered.

usage: check_layers.py SRC_DIR [BUILD_DIR] [--list]

Reads every #include "..." of the library's sources (comm/, kernels/, topo/,
shard/, models/, include/), resolving each as the compiler would (the
including file's folder, then the SEARCH folders below), and, given
BUILD_DIR, which functions each object file of the library and the models
calls and defines (nm): a call from x.c to a function defined in y.c is an
edge x -> y just as an include is. It checks eight rules:

  cycle      no two modules depend on each other, directly or around a
             longer loop (a module is a .c file with its own .h: x.c
             including x.h is no edge). Reported once per cycle, by its
             members.
  public     shard/ and models/ reach the library only through include/
             (sharc.h, sharc_shard.h) and their own folder's headers: the
             engine calls the public collectives, nothing below them.
  transport  only files in comm/transport/NAME/ include that transport's
             headers: the rest of comm/ (and the other transports) see
             transports through comm/transport/transport.h.
  call       (with BUILD_DIR) no file outside comm/transport/NAME/ calls a
             function defined there: transports are reached through the
             registry (comm/transport/registry.c) and the vtable, never by
             name.
  private    a header named NAME_impl.h is included only by the files of its
             own folder (a transport's or the GPU layer's insides).
  gpu        outside comm/gpu/ the GPU layer is reached through
             comm/gpu/gpu.h alone (which brings devptr.h): how a call on
             device memory is carried out (the paths, the CUDA stream
             binding) stays inside the layer.
  layer      a file includes no header of a layer above its own (LAYERS
             below: core, then algo/kernels/topo, net, state, transport,
             fault, exec, gpu, api, launch/shard, models, plan).
  plan       the planner (plan/, above the models) includes include/, its
             own folder, the models' headers and, of the layers below, only
             the pure logic it replays: shard/layout.h (the engine's unit
             layout) and comm/algo/cost.h (sharc's cost model). The
             sharc-plan command's own sources (plan/sharc_plan*.c), a
             program like comm/launch's tools, may also read a machine
             through topo/topo.h (--topology); the library may not.

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

DIRS = ("comm", "kernels", "topo", "shard", "models", "plan", "include")
SEARCH = ("comm/core", "comm/algo", "comm/net", "comm/state", "comm/transport",
          "comm/transport/shm", "comm/transport/tcp", "comm/transport/ib",
          "comm/fault", "comm/exec", "comm/gpu", "comm/api", "kernels", "topo",
          "include")
# The layers, bottom (0) to top: a file may include headers of its own
# layer and of layers below it. include/ (the public API) is open to all.
LAYERS = (("comm/core",), ("comm/algo", "kernels", "topo"), ("comm/net",),
          ("comm/state",), ("comm/transport",), ("comm/fault",), ("comm/exec",),
          ("comm/gpu",), ("comm/api",), ("comm/launch", "comm/nccl", "shard"),
          ("models",), ("plan",))
# What plan/ may include beyond include/, plan/ and models/.
PLAN_PURE = (os.path.join("shard", "layout.h"),
             os.path.join("comm", "algo", "cost.h"))
# What the sharc-plan command's sources (plan/sharc_plan*.c, not in the
# library) may include beyond that.
PLAN_COMMAND = os.path.join("plan", "sharc_plan")
PLAN_COMMAND_MAY = (os.path.join("topo", "topo.h"),)
EXTS = (".c", ".h", ".cu", ".cpp")
REGISTRY = os.path.join("comm", "transport", "registry.c")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def sources(src):
    out = []
    for d in DIRS:
        for dp, _, fs in os.walk(os.path.join(src, d)):
            out += [os.path.relpath(os.path.join(dp, f), src)
                    for f in fs if f.endswith(EXTS)]
    return sorted(out)


def resolve(src, frm, inc):
    # plan/ compiles with shard/, comm/algo/ and models/ on its path
    extra = (("shard", "comm/algo", "models")
             if frm.startswith("plan" + os.sep) else ())
    for base in (os.path.dirname(frm),) + extra + SEARCH:
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(src, p)):
            return p
    return None  # a system or generated header


def layer(path):
    """Index of path's layer in LAYERS; None for include/ and the rest."""
    for i, group in enumerate(LAYERS):
        for d in group:
            if path.startswith(d + os.sep):
                return i
    return None


def transport_of(path):
    """The transport folder (comm/transport/NAME) path lies in, or None."""
    parts = path.split(os.sep)
    if len(parts) > 3 and parts[:2] == ["comm", "transport"]:
        return os.sep.join(parts[:3])
    return None


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
    """{source path: object path} of the library's layers, the engine and
    the models."""
    out = {}
    tops = [os.path.join(build, "CMakeFiles", d)
            for d in sorted(os.listdir(os.path.join(build, "CMakeFiles")))
            if d.startswith("sharc_layer_") or d == "sharc_shard_obj.dir"]
    tops.append(os.path.join(build, "models/CMakeFiles/sharc_models.dir"))
    tops.append(os.path.join(build, "plan/CMakeFiles/sharc_plan.dir"))
    for top in tops:
        for dp, _, fs in os.walk(top):
            for f in fs:
                if f.endswith(".o"):
                    rel = os.path.relpath(os.path.join(dp, f[:-2]), top)
                    if "models" in top.split(os.sep):
                        rel = os.path.join("models", rel)
                    elif "plan" in top.split(os.sep):
                        rel = os.path.join("plan", rel)
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
                 "sharc_layer_*.dir: build first")
    syms = {
src: symbols(o) for src, o in objs.items()}
    owner = {}
    for src, (defined, _) in syms.items():
        for name in defined:
            owner.setdefault(name, src)
    return {(src, owner[name]) for src, (_, und) in syms.items()
            for name in und if name in owner and owner[name] != src}


def violations(src, build=None):
    edges, found = {}, set()
    if build:
        for frm, to in call_edges(build):
            if module(frm) != module(to):
                edges.setdefault(module(frm), set()).add(module(to))
            if (transport_of(to) and transport_of(to) != transport_of(frm)
                    and frm != REGISTRY):
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
            if top == "plan" and not (
                    to.split(os.sep)[0] in ("include", "plan", "models") or
                    to in PLAN_PURE or
                    (f.startswith(PLAN_COMMAND) and f.endswith(".c") and
                     to in PLAN_COMMAND_MAY)):
                found.add(f"plan {f} -> {to}")
            if transport_of(to) and transport_of(to) != transport_of(f):
                found.add(f"transport {f} -> {to}")
            if (to.endswith("_impl.h") and
                    os.path.dirname(to) != os.path.dirname(f)):
                found.add(f"private {f} -> {to}")
            gpu = os.path.join("comm", "gpu")
            if (os.path.dirname(to) == gpu and os.path.dirname(f) != gpu and
                    os.path.basename(to) != "gpu.h"):
                found.add(f"gpu {f} -> {to}")
            lf, lt = layer(f), layer(to)
            if lf is not None and lt is not None and lt > lf:
                found.add(f"layer {f} -> {to}")
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
