#!/usr/bin/env python3
"""clang-tidy's clean results, remembered by content (scripts/dev.sh lint_tidy).

  tidy_cache.py stale BUILD_DIR CACHE PENDING [UNIT...]
        prints the units (all of BUILD_DIR's compile_commands.json when none
        are given) whose key is not in CACHE, one per line, and writes their
        keys to PENDING
  tidy_cache.py record CACHE PENDING UNIT...
        puts these units' keys from PENDING in CACHE (they were found clean)

The keys are taken before clang-tidy runs, so that a file edited while it
runs is not remembered as clean with its new contents.

A unit's key is a SHA-256 over clang-tidy's version, .clang-tidy, the unit's
compile flags, and the path and bytes of the unit and of every file of the
repository it includes, directly or not (the compiler's -MM list; generated
headers under build/ are left out, their inputs are in the repository).
Paths count relative to the repository, so a clone elsewhere has the same
keys. A unit whose key is in CACHE was checked, with these exact inputs, and
had no finding: checking it again cannot find anything new. Anything that
changes one of the inputs changes the key, and the unit is checked again.
CACHE is committed (.ci/tidy-clean), so that CI checks only what changed since
the last clean run instead of every file (about 23 minutes on 2 cores).
"""
import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))


def rel(path, cwd):
    p = os.path.realpath(os.path.join(cwd, path))
    return os.path.relpath(p, ROOT) if p.startswith(ROOT + os.sep) else None


def load_units(build_dir):
    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    units = {}
    for e in entries:
        r = rel(e["file"], e["directory"])
        if r is None or r.startswith("build/") or not r.endswith((".cc", ".cpp", ".cxx")):
            continue
        units[r] = e
    return units


def flags_of(entry):
    args = shlex.split(entry["command"])
    out = []
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c" or os.path.realpath(os.path.join(entry["directory"], a)) == os.path.realpath(
            os.path.join(entry["directory"], entry["file"])
        ):
            continue
        out.append(a)
    return args[0], out


def common_inputs():
    h = hashlib.sha256()
    h.update(b"tidy-cache v2\0")
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True).stdout
    h.update(version.encode() + b"\0")
    with open(os.path.join(ROOT, ".clang-tidy"), "rb") as f:
        h.update(f.read())
    return h.digest()


def is_codegen_level(flag):
    return flag in ("-g", "-g1", "-g2", "-g3", "-O1", "-O2", "-O3")


def canonical_flag(flag):
    for prefix in ("-isystem", "-I", ""):
        path = flag[len(prefix):]
        if flag.startswith(prefix) and path.startswith("/") and os.path.exists(path):
            return prefix + os.path.realpath(path)
    return flag


def key_of(unit, entry, common):
    compiler, flags = flags_of(entry)
    cwd = entry["directory"]
    dep = subprocess.run(
        [compiler, *flags, "-MM", "-MG", "-MT", "x", os.path.join(cwd, entry["file"])],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if dep.returncode != 0:
        return None  # cannot tell: check it
    files = set()
    for word in dep.stdout.replace("\\\n", " ").split()[1:]:
        r = rel(word, cwd)
        if r is not None and not r.startswith("build/"):
            files.add(r)
    files.add(unit)
    h = hashlib.sha256(common)
    # Flags without the checkout's own path, so that every clone agrees, and
    # without the debug-information level (-g, -g1) and optimization levels
    # above -O0 (-O1, -O2, -O3: each defines the same __OPTIMIZE__), which
    # change the code made, never what clang-tidy reads: a change of them
    # alone (a preset's -g1, the tests' -O1) leaves the record valid.
    # The build directory is named as build/release whichever it is: the
    # record was made there, and clang-tidy now reads the same preset's
    # configuration from build/tidy (scripts/dev.sh configure_tidy).
    # Include folders by what they are, not by the link they were found
    # through: CUDA's is /usr/local/cuda or /usr/local/cuda-13.0 as PATH
    # has it, the same headers (a clean clone run with another PATH checked
    # 87 units again).
    flag_text = " ".join(canonical_flag(f) for f in flags if not is_codegen_level(f))
    flag_text = flag_text.replace(os.path.realpath(cwd), os.path.join(ROOT, "build", "release"))
    h.update(flag_text.replace(ROOT, "<root>").encode() + b"\0")
    for r in sorted(files):
        h.update(r.encode() + b"\0")
        try:
            with open(os.path.join(ROOT, r), "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        except OSError:
            return None
    return h.hexdigest()


def keys_for(build_dir, wanted):
    units = load_units(build_dir)
    if not wanted:
        wanted = sorted(units)
    common = common_inputs()
    jobs = int(os.environ.get("DLAUNCH_JOBS", os.cpu_count() or 2))
    out = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            u: pool.submit(key_of, u, units[u], common) if u in units else None for u in wanted
        }
        for u, fut in futures.items():
            out[u] = fut.result() if fut is not None else None
    return out


def read_cache(path):
    cache = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    cache[parts[1]] = parts[0]
    except FileNotFoundError:
        pass
    return cache


def write_cache(path, cache):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for u in sorted(cache):
            f.write(f"{cache[u]} {u}\n")
    os.replace(tmp, path)


def main(argv):
    if len(argv) >= 4 and argv[0] == "stale":
        build_dir, cache_path, pending_path, wanted = argv[1], argv[2], argv[3], argv[4:]
        keys = keys_for(build_dir, wanted)
        cache = read_cache(cache_path)
        # Units that are gone from the build are forgotten.
        units = load_units(build_dir)
        cache = {u: k for u, k in cache.items() if u in units}
        if os.path.exists(cache_path):
            write_cache(cache_path, cache)
        pending = {}
        for u, k in keys.items():
            if k is None or cache.get(u) != k:
                print(u)
                if k is not None:
                    pending[u] = k
        write_cache(pending_path, pending)
        return 0
    if len(argv) >= 3 and argv[0] == "record":
        cache_path, pending_path, done = argv[1], argv[2], argv[3:]
        cache = read_cache(cache_path)
        pending = read_cache(pending_path)
        for u in done:
            if u in pending:
                cache[u] = pending[u]
        write_cache(cache_path, cache)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
