"""One table from pytest JUnit XML files: passed / failed / skipped per test file, and the
most common failure messages (what tests/gpu/run.sh prints last)."""

import collections
import sys
import xml.etree.ElementTree as ET


def main(paths: list) -> None:
    per_file = collections.defaultdict(collections.Counter)
    reasons = collections.Counter()
    cases = [case for path in paths for case in ET.parse(path).iter("testcase")]
    for case in cases:
        name = case.get("classname", "").rsplit(".", 1)[0] if "." in case.get("classname", "") else "?"
        verdict = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                verdict = "failed"
                message = (child.get("message") or "?").splitlines() or ["?"]
                reasons[message[0][:140]] += 1
            elif child.tag == "skipped":
                verdict = "skipped"
        per_file[name][verdict] += 1
    total = collections.Counter()
    print(f"{'file':48} {'passed':>7} {'failed':>7} {'skipped':>8}")
    for name in sorted(per_file):
        c = per_file[name]
        total.update(c)
        print(f"{name:48} {c['passed']:7} {c['failed']:7} {c['skipped']:8}")
    print(f"{'total':48} {total['passed']:7} {total['failed']:7} {total['skipped']:8}")
    for msg, n in reasons.most_common(25):
        print(f"{n:5}  {msg}")


if __name__ == "__main__":
    main(sys.argv[1:])
