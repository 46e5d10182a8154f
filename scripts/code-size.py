#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Classes with too many methods and functions with too many lines, read with universal-ctags.

A class counts every member function it declares (constructors, operators and overloads each count
once; a member defined out of line counts once, where it is declared). A function counts the lines
from its name to its closing brace. Limits: 40 methods, 120 lines. `scripts/code-size.allow` names
the exceptions, each with its reason; the test `layering.code_size` fails on anything over a limit
that is not named there, and on a name there that is no longer over (so the list cannot rot).

  scripts/code-size.py [--all] [--top N] [SRC_DIR]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys

MAX_METHODS = 40
MAX_LINES = 120
HERE = os.path.dirname(os.path.abspath(__file__))


def tags(src):
    out = subprocess.run(
        ["ctags", "-R", "--output-format=json", "--fields=+KSsZne", "--extras=-F",
         "--languages=C++", "--langmap=C++:+.hpp.cpp.h", "-f", "-", src],
        check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        t = json.loads(line)
        if t.get("_type") == "tag":
            yield t


def normalise(sig):
    # A declaration's default arguments and parameter names differ from its definition's.
    sig = re.sub(r"\s*=\s*[^,)]*", "", sig or "")
    return re.sub(r"\s+", " ", sig).strip()


def measure(src):
    classes = {}          # qualified name -> path of its definition
    declared = collections.defaultdict(set)   # class -> {(name, signature)}
    defined = collections.defaultdict(set)    # class -> {(name, signature)} from function bodies
    functions = []        # (lines, qualified name, path:line)
    for t in tags(src):
        kind, scope = t.get("kind"), t.get("scope")
        if kind in ("class", "struct"):
            name = f"{scope}::{t['name']}" if scope else t["name"]
            classes[name] = t["path"]
        if kind not in ("prototype", "function"):
            continue
        if kind == "function" and "end" in t:
            lines = t["end"] - t["line"] + 1
            qual = f"{scope}::{t['name']}" if scope else t["name"]
            functions.append((lines, qual, f"{t['path']}:{t['line']}"))
        if t.get("scopeKind") in ("class", "struct") and scope:
            key = (t["name"], normalise(t.get("signature")))
            (declared if kind == "prototype" else defined)[scope].add(key)
    counts = {}
    for cls in set(declared) | set(defined):
        # Members defined in the class body have no prototype; members declared there and
        # defined out of line have both and count once.
        counts[cls] = len(declared[cls] | defined[cls])
    return counts, functions


def short(name):
    return name.replace("nvtcp::", "")


def load_allow(path):
    allow = {}
    if os.path.exists(path):
        for raw in open(path, encoding="utf-8"):
            line = raw.split("#", 1)[0].strip()
            if line:
                name, _, reason = line.partition(" ")
                allow[name] = reason.strip()
    return allow


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src", nargs="?", default=os.path.join(HERE, "..", "src"))
    ap.add_argument("--all", action="store_true", help="list everything over, allowed or not")
    ap.add_argument("--top", type=int, default=0, help="also print the N largest of each")
    ap.add_argument("--check", action="store_true", help="exit 1 on anything over and not allowed")
    args = ap.parse_args()
    counts, functions = measure(args.src)
    allow = load_allow(os.path.join(HERE, "code-size.allow"))
    bad, used = [], set()
    for cls, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        if n > MAX_METHODS:
            name = short(cls)
            if name in allow:
                used.add(name)
            else:
                bad.append(f"class {name}: {n} methods (limit {MAX_METHODS})")
            if args.all or name not in allow:
                print(f"class {name}: {n} methods" + ("  [allowed]" if name in allow else ""))
    for lines, qual, where in sorted(functions, reverse=True):
        if lines > MAX_LINES:
            name = short(qual)
            if name in allow:
                used.add(name)
            else:
                bad.append(f"function {name} ({where}): {lines} lines (limit {MAX_LINES})")
            if args.all or name not in allow:
                print(f"function {name} ({where}): {lines} lines" + ("  [allowed]" if name in allow else ""))
    for stale in sorted(set(allow) - used):
        bad.append(f"{stale} is in scripts/code-size.allow but is no longer over a limit: remove it")
    if args.top:
        print(f"-- the {args.top} classes with the most methods")
        for cls, n in sorted(counts.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"{n:4} {short(cls)}")
        print(f"-- the {args.top} longest functions")
        for lines, qual, where in sorted(functions, reverse=True)[:args.top]:
            print(f"{lines:4} {short(qual)} ({where})")
    if args.check and bad:
        print("\n".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
