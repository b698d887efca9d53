"""An agent-style loop on LayerFS: write code, run the tests, commit when
they pass, and fork a branch to try an alternative without touching the
first result.

    python3 examples/agent_loop.py [PROJECT]

It uses the daemon ``layerfs.Client()`` finds (``$LAYERFS_DAEMON``, else
the default Store's, started when needed). A real agent would ask a model
for each candidate; here the candidates are written out, the first one
buggy, so the loop has something to reject.
"""

from __future__ import annotations

import sys
import time

import layerfs

TESTS = """\
from fizzbuzz import fizzbuzz
assert [fizzbuzz(i) for i in range(1, 16)] == [
    "1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz", "11", "Fizz", "13", "14", "FizzBuzz"]
print("tests pass")
"""

# What a model might propose, in order.
CANDIDATES = [
    # Wrong: checks 3 before 15.
    "def fizzbuzz(n):\n"
    "    if n % 3 == 0: return 'Fizz'\n"
    "    if n % 5 == 0: return 'Buzz'\n"
    "    if n % 15 == 0: return 'FizzBuzz'\n"
    "    return str(n)\n",
    "def fizzbuzz(n):\n"
    "    if n % 15 == 0: return 'FizzBuzz'\n"
    "    if n % 3 == 0: return 'Fizz'\n"
    "    if n % 5 == 0: return 'Buzz'\n"
    "    return str(n)\n",
]

ALTERNATIVE = "def fizzbuzz(n):\n    return ('Fizz' * (n % 3 == 0) + 'Buzz' * (n % 5 == 0)) or str(n)\n"


def attempt(ws: layerfs.Workspace, code: str) -> bool:
    """Write one candidate and run the tests; True when they pass. (-B: a
    candidate of the same size written within the same second would pass
    for the last one's cached bytecode.)"""
    ws.files.write("fizzbuzz.py", code)
    res = ws.exec("python3 -B test_fizzbuzz.py", timeout=60, on_stdout=lambda t: print("   |", t, end=""))
    print(f"   exit {res.exit_code} in {res.receipt.wall_ms:.1f} ms")
    if not res.ok:
        print("   " + (res.stderr.strip().splitlines() or ["(no stderr)"])[-1])
    return res.ok


def main() -> int:
    project = sys.argv[1] if len(sys.argv) > 1 else f"agent-loop-{int(time.time())}"
    client = layerfs.Client()
    client.projects.create(project)
    print(f"project {project}")

    with client.workspaces.create(project, branch="main") as ws:
        ws.files.write("test_fizzbuzz.py", TESTS)
        for i, code in enumerate(CANDIDATES, 1):
            print(f"candidate {i}:")
            if attempt(ws, code):
                cr = ws.commit(f"fizzbuzz, candidate {i}")
                print(f"   committed {cr.commit[:12]} ({cr.result})")
                break
        else:
            print("no candidate passed; nothing committed")
            return 1

    # Try an alternative on a fork: main keeps the working version whatever happens.
    client.branches.fork(project, "alternative", from_ref="main")
    with client.workspaces.create(project, branch="alternative") as alt:
        print("alternative on branch 'alternative':")
        if attempt(alt, ALTERNATIVE):
            print(f"   committed {alt.commit('fizzbuzz, one expression').commit[:12]}")

    for branch in ("main", "alternative"):
        print(f"log {branch}: " + " <- ".join(c.message for c in client.log(project, branch)))
    print("diff main..alternative: " + ", ".join(f"{c.kind} {c.path}" for c in client.diff(project, "main", "alternative")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
