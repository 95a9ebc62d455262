#!/usr/bin/env python3
"""Names two files of one library or program both define at file scope.

  unity_names.py BUILD_DIR

The libraries and programs build in batches (CMake's unity build: DLAUNCH_UNITY
in CMakeLists.txt, DLAUNCH_UNITY_TESTS in tests/CMakeLists.txt for the
GoogleTest programs): the files of a batch are one translation unit, so a
helper one file defines in its anonymous namespace is seen by the next file
too. The same name with the same signature fails to compile; with another
signature it overloads, and a call can silently reach the other file's helper
(a `run_until(io, Done)` template beats a `run_until(io, const
std::function<bool()>&)` for a lambda). So no two files of one target may
define the same name at file scope: this lists every such name and exits 1.

It reads which files form each program from BUILD_DIR's generated batch files
(CMakeFiles/*.dir/Unity/unity_*.cxx) and, in each file, the definitions that
start a line (this tree's style does not indent namespaces): functions,
classes, structs, enums, type aliases and constants. Macros are left out
(the preprocessor says when one is redefined).
"""
import collections
import glob
import os
import re
import sys

INCLUDE = re.compile(r'^#include "(.+)"$')
# A definition that starts a line at file or namespace scope.
TYPE = re.compile(r"^(?:template\s*<.*>\s*)?(?:struct|class|union|enum(?:\s+class)?)\s+(\w+)\b(?!\s*;)")
ALIAS = re.compile(r"^using\s+(\w+)\s*=")
CONST = re.compile(
    r"^(?:static\s+|inline\s+|constexpr\s+|const\s+)+[\w:<>, ]+?[\s*&]+(\w+)\s*(?:=|\{|\[)")
FUNC = re.compile(r"^(?:template\s*<.*>\s*)?(?:static\s+|inline\s+|constexpr\s+|\[\[\w+\]\]\s+)*"
                  r"[\w:<>,]+(?:<[^()]*>)?[\s*&]+(\w+)\s*\((?!.*\)\s*;$)")
NOT_NAMES = {"TEST", "TEST_F", "TEST_P", "TYPED_TEST", "INSTANTIATE_TEST_SUITE_P", "main",
             "operator"}


def definitions(path):
    """{name: how it is defined}: an alias's whole line (the same alias may be
    repeated), anything else its file."""
    names = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    for line in lines:
        if not line or line[0] in " \t#/}{":
            continue
        if line.startswith(("namespace", "using namespace", "TEST", "return")):
            continue
        for pattern in (TYPE, ALIAS, CONST, FUNC):
            m = pattern.match(line)
            if m and m.group(1) not in NOT_NAMES:
                names[m.group(1)] = line.strip() if pattern is ALIAS else path
                break
    return names


def programs(build_dir):
    found = collections.defaultdict(list)
    for batch in glob.glob(os.path.join(build_dir, "**", "Unity", "unity_*.cxx"), recursive=True):
        program = batch.split(os.sep + "Unity" + os.sep)[0]
        with open(batch) as f:
            for line in f:
                m = INCLUDE.match(line.strip())
                if m:
                    found[program].append(m.group(1))
    return found


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    build_dir = sys.argv[1]
    found = programs(build_dir)
    if not found:
        print(f"unity_names: no batch files under {build_dir} (configure it with "
              "DLAUNCH_UNITY=ON, DLAUNCH_UNITY_TESTS=ON and the tests)", file=sys.stderr)
        return 2
    root = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))
    clashes = 0
    for program, files in sorted(found.items()):
        where = collections.defaultdict(list)
        how = collections.defaultdict(set)
        for path in files:
            for name, definition in definitions(path).items():
                where[name].append(os.path.relpath(path, root))
                how[name].add(definition)
        for name, paths in sorted(where.items()):
            if len(paths) > 1 and len(how[name]) > 1:
                clashes += 1
                print(f"{os.path.basename(program).removesuffix('.dir')}: {name} is defined in "
                      + ", ".join(paths))
    if clashes:
        print(f"unity_names: {clashes} name(s) defined by more than one file of a library or "
              "program; rename them or share one definition (a header of its own)",
              file=sys.stderr)
        return 1
    print(f"unity_names: {sum(len(f) for f in found.values())} files of {len(found)} libraries "
          "and programs define no name twice", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
