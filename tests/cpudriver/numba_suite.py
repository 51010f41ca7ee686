"""numba-cuda's own test suites, run so that a fault in one test cannot fail the next ones.

A kernel fault (an illegal address) is the CUDA context's sticky error, on a GPU as on recap's CPU
driver: every later test in the same process fails with it. numba's runner gives no isolation
below a worker process (`-m` hands each worker a chunk of up to 100 tests), so the count it
reports depends on which tests share a process with a faulting one. numba_suite.sh runs each test
module in a process of its own with this helper, then every test that failed or erred there again
alone, in a fresh process, and counts that result: the same procedure on the CPU driver and on a
GPU, so the two counts compare.

    python numba_suite.py modules SUITE                 test modules of numba.cuda.tests.SUITE
    python numba_suite.py run OUT.jsonl NAME...         run modules or test ids, one JSON line each
    python numba_suite.py run-alone OUT.jsonl ID        one test again, in a process of its own
    python numba_suite.py missing OUT.jsonl MODULE      the module's tests OUT.jsonl has no line for
    python numba_suite.py failed OUT.jsonl              the tests that failed or erred in OUT.jsonl
    python numba_suite.py summary DIR SUITE             the suite's counts, and failures by cause
    python numba_suite.py versions                      the packages the counts depend on
"""

import json
import os
import sys
import unittest


def modules(suite):
    import numba.cuda.tests as tests

    root = os.path.join(os.path.dirname(tests.__file__), suite)
    names = sorted(n[:-3] for n in os.listdir(root) if n.startswith("test_") and n.endswith(".py"))
    for n in names:
        print(f"numba.cuda.tests.{suite}.{n}")


def ids(out_path, module):
    """The test ids of a module that `out_path` has no line for (those a crash never reached)."""
    done = outcomes(out_path)

    def flat(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                yield from flat(t)
            else:
                yield t.id()

    for i in flat(unittest.defaultTestLoader.loadTestsFromName(module)):
        if i not in done:
            print(i)


def reason(err):
    """The first line of a failure's exception: what the failures are grouped by."""
    if isinstance(err, tuple):
        exc = err[1]
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = str(err)
    line = text.strip().splitlines()[0] if text.strip() else "no message"
    return line[:300]


class Recorder(unittest.TestResult):
    """Writes each test's outcome as it ends, so a crash keeps what ran before it."""

    def __init__(self, out, alone):
        super().__init__()
        self.out = out
        self.alone = alone

    def record(self, test, outcome, why=""):
        line = {"id": test.id(), "outcome": outcome, "reason": why, "alone": self.alone}
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self.record(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.record(test, "fail", reason(err))

    def addError(self, test, err):
        super().addError(test, err)
        # An error in a class or module fixture has no test id of its own.
        self.record(test if hasattr(test, "id") else unittest.FunctionTestCase(lambda: None), "error", reason(err))

    def addSkip(self, test, why):
        super().addSkip(test, why)
        self.record(test, "skipped", why)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.record(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.record(test, "fail", "unexpected success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            outcome = "fail" if issubclass(err[0], test.failureException) else "error"
            self.record(test, outcome, reason(err))


def run(out_path, names, alone=False):
    suite = unittest.defaultTestLoader.loadTestsFromNames(names)
    with open(out_path, "a") as out:
        result = Recorder(out, alone)
        suite.run(result)


RANK = {"pass": 0, "skipped": 1, "fail": 2, "error": 3}


def outcomes(path):
    """Per test id, its outcome: the worst its module's run gave it (a failing subtest fails the
    test), unless it ran again alone, which then decides."""
    in_module, alone = {}, {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                # pytest's skip (`pytest.importorskip`, which numba-cuda's tests use) is an error
                # to unittest; under pytest, numba-cuda's own runner, it is a skip.
                if r["outcome"] == "error" and r["reason"].startswith("Skipped: "):
                    r["outcome"] = "skipped"
                seen = alone if r.get("alone") else in_module
                prior = seen.get(r["id"])
                if prior is None or RANK.get(r["outcome"], 3) > RANK.get(prior["outcome"], 3):
                    seen[r["id"]] = r
    in_module.update(alone)
    return in_module


def summary(directory, suite):
    results = {}
    for name in sorted(os.listdir(directory)):
        if name.startswith(f"numba.cuda.tests.{suite}.") and name.endswith(".jsonl"):
            results.update(outcomes(os.path.join(directory, name)))
    counts = {k: 0 for k in ("pass", "fail", "error", "skipped")}
    causes = {}
    for r in results.values():
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        if r["outcome"] in ("fail", "error"):
            causes.setdefault(r["reason"], []).append(r["id"])
    print(
        f"numba.cuda.tests.{suite}: tests {len(results)} pass {counts['pass']} fail {counts['fail']} "
        f"error {counts['error']} skipped {counts['skipped']}"
    )
    with open(os.path.join(directory, f"{suite}.failures.txt"), "w") as f:
        for why, ids in sorted(causes.items(), key=lambda c: -len(c[1])):
            f.write(f"{len(ids)}  {why}\n")
            for i in sorted(ids):
                f.write(f"      {i}\n")


def versions():
    from importlib import metadata

    for p in ("numba", "numba-cuda", "cuda-bindings", "nvidia-nvvm", "nvidia-cuda-nvrtc", "numpy"):
        try:
            print(f"{p}=={metadata.version(p)}")
        except metadata.PackageNotFoundError:
            print(f"{p} absent")


def main(argv):
    if len(argv) >= 2 and argv[0] == "modules":
        modules(argv[1])
    elif len(argv) >= 3 and argv[0] in ("run", "run-alone"):
        run(argv[1], argv[2:], alone=argv[0] == "run-alone")
    elif len(argv) == 3 and argv[0] == "summary":
        summary(argv[1], argv[2])
    elif len(argv) == 2 and argv[0] == "failed":
        for i, r in outcomes(argv[1]).items():
            # Errors of a class or module fixture name no single test to run again.
            if r["outcome"] in ("fail", "error") and " " not in i:
                print(i)
    elif len(argv) == 3 and argv[0] == "missing":
        ids(argv[1], argv[2])
    elif argv == ["versions"]:
        versions()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
