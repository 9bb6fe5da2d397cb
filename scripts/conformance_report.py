"""Helpers of scripts/conformance.sh: rewrite upstream tests to conveyor, and compare results.

conformance_report.py adapt TEST_DIR         let older upstream files run on torch 2.13
                                             (both sides get the same adaptation)
conformance_report.py rewrite TEST_DIR       rewrite every .py file below TEST_DIR in place
conformance_report.py report RESULTS FILE... print the pass/fail/skip table and the tests
                                             that pass on torch but not on conveyor
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# torchdata's names first: "torchdata.stateful_dataloader" must not become "torchconveyor...".
REWRITES = (
    (re.compile(r"\btorchdata\.stateful_dataloader\b"), "conveyor.stateful_dataloader"),
    (re.compile(r"\btorch\.utils\.data\b"), "conveyor"),
)
_FIRST_IMPORT = re.compile(r"^(import |from )", re.MULTILINE)
_FUTURE = re.compile(r"^from __future__ import .*$", re.MULTILINE)


# torch 2.13's ``skipIfTorchDynamo`` takes a message; the stored test_datapipe.py predates that
# and uses it bare, which fails at import on torch itself.
ADAPTATIONS = (
    (re.compile(r"^(\s*)@skipIfTorchDynamo\s*$", re.MULTILINE), r"\1@skipIfTorchDynamo()"),
)


def adapt_tree(test_dir: Path) -> None:
    for path in sorted(test_dir.rglob("*.py")):
        text = path.read_text()
        for pattern, replacement in ADAPTATIONS:
            text = pattern.sub(replacement, text)
        path.write_text(text)


def rewrite_source(text: str) -> str:
    """The same test with every ``torch.utils.data`` / torchdata loader name taken from conveyor.

    Dotted uses (``torch.utils.data.get_worker_info()``) are rewritten too, so an
    ``import conveyor`` is added beside the file's imports.
    """
    for pattern, replacement in REWRITES:
        text = pattern.sub(replacement, text)
    futures = list(_FUTURE.finditer(text))
    if futures:
        at = futures[-1].end() + 1
    else:
        first = _FIRST_IMPORT.search(text)
        at = first.start() if first else 0
    return (
        text[:at] + "import conveyor  # conformance: rewritten from torch.utils.data\n" + text[at:]
    )


def rewrite_tree(test_dir: Path) -> None:
    for path in sorted(test_dir.rglob("*.py")):
        path.write_text(rewrite_source(path.read_text()))


def outcomes(xml_path: Path) -> dict[str, str] | None:
    """``{"Class::test": "passed"|"failed"|"skipped"}`` from a JUnit file; None if absent."""
    if not xml_path.exists():
        return None
    try:
        tree = ET.parse(xml_path)
    except ET.ParseError:
        return None
    results: dict[str, str] = {}
    for case in tree.iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                status = "failed"
            elif child.tag == "skipped" and status == "passed":
                status = "skipped"
        results[name] = status
    return results


def _counts(results: dict[str, str] | None) -> str:
    if results is None:
        return "did not run"
    values = list(results.values())
    return "/".join(str(values.count(s)) for s in ("passed", "failed", "skipped"))


def report(results_dir: Path, files: list[str]) -> int:
    lines = [
        "| file | torch pass/fail/skip | conveyor pass/fail/skip | pass on torch, not conveyor |",
        "|---|---|---|---|",
    ]
    missing: list[str] = []
    totals = {"torch": 0, "conveyor": 0, "lost": 0}
    for f in files:
        key = f.replace("/", "_")
        torch_results = outcomes(results_dir / f"torch-{key}.xml")
        conveyor_results = outcomes(results_dir / f"conveyor-{key}.xml") or {}
        torch_pass = {t for t, s in (torch_results or {}).items() if s == "passed"}
        conveyor_pass = {t for t, s in conveyor_results.items() if s == "passed"}
        lost = sorted(torch_pass - conveyor_pass)
        totals["torch"] += len(torch_pass)
        totals["conveyor"] += len(torch_pass & conveyor_pass)
        totals["lost"] += len(lost)
        conveyor_counts = _counts(conveyor_results if conveyor_results else None)
        lines.append(f"| {f} | {_counts(torch_results)} | {conveyor_counts} | {len(lost)} |")
        missing += [f"{f}::{t} ({conveyor_results.get(t, 'not run')})" for t in lost]
    lines.append(
        f"| **total** | {totals['torch']} pass | {totals['conveyor']} of those pass | "
        f"{totals['lost']} |"
    )
    table = "\n".join(lines)
    print(table)
    print()
    print("Pass on torch, not on conveyor:" if missing else "Nothing passes on torch only.")
    for item in missing:
        print(f"  {item}")
    (results_dir / "summary.md").write_text(table + "\n\n" + "\n".join(missing) + "\n")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "adapt":
        adapt_tree(Path(argv[1]))
        return 0
    if len(argv) >= 2 and argv[0] == "rewrite":
        rewrite_tree(Path(argv[1]))
        return 0
    if len(argv) >= 2 and argv[0] == "report":
        return report(Path(argv[1]), argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
