#!/usr/bin/env python3
"""Builds each wall probe (tests/walls/CMakeLists.txt) and checks the result.

  check_walls.py BUILD_DIR PROBES_TXT

PROBES_TXT has one line per probe: EXPECT TARGET ROOM HEADER, EXPECT being
"allowed" (the probe must compile) or "forbidden" (its build must fail, and
because the compiler cannot find HEADER, not for another reason). Exits 1
naming every probe that did otherwise.
"""
import subprocess
import sys


def main():
    build_dir, table = sys.argv[1], sys.argv[2]
    wrong = []
    with open(table) as f:
        probes = [line.split() for line in f if line.strip()]
    for expect, target, room, header in probes:
        run = subprocess.run(["cmake", "--build", build_dir, "--target", target],
                             capture_output=True, text=True)
        out = run.stdout + run.stderr
        not_found = f"{header}: No such file or directory" in out
        if expect == "allowed":
            ok = run.returncode == 0
        else:
            ok = run.returncode != 0 and not_found
        verdict = "ok" if ok else "WRONG"
        print(f"{verdict}: {room} includes {header}: {expect}, "
              f"build {'failed' if run.returncode else 'succeeded'}")
        if expect == "forbidden" and not_found:
            line = next(l for l in out.splitlines() if "No such file or directory" in l)
            print(f"    {line.strip()}")
        if not ok:
            print(out)
            wrong.append(target)
    if len(probes) < 2 or not any(p[0] == "forbidden" for p in probes):
        print("the probe table is missing or holds no forbidden include")
        return 1
    if wrong:
        print(f"{len(wrong)} of {len(probes)} probes did not do as expected: {' '.join(wrong)}")
        return 1
    print(f"all {len(probes)} probes as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
