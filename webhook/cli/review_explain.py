"""`rdma-webhook review --explain`: the record `--output json` prints, told for people. The
headline's outcome is the record's (`mutated` is MUTATED, `not-checked` NOT CHECKED), the `why`
lines are its messages, the warnings are the decision's in full (the AdmissionReview answer cuts
them to the API server's length)."""

from __future__ import annotations

import difflib
from typing import Any, TextIO

import yaml


def color(enabled: bool, code: str, text: str) -> str:
    return f"\033[{code}m{text}\033[0m" if enabled else text


def headline_outcome(outcome: str) -> str:
    """The word of the headline for a record's outcome (one for one, so they never disagree)."""
    return outcome.upper().replace("-", " ")


def _diff(before: Any, after: Any, on: bool) -> list[str]:
    a = yaml.safe_dump(before, sort_keys=False, width=1000).splitlines()
    b = yaml.safe_dump(after, sort_keys=False, width=1000).splitlines()
    lines = []
    for line in difflib.unified_diff(a, b, "before", "after", lineterm="", n=2):
        if line.startswith("+") and not line.startswith("+++"):
            line = color(on, "32", line)
        elif line.startswith("-") and not line.startswith("---"):
            line = color(on, "31", line)
        elif line.startswith("@@"):
            line = color(on, "36", line)
        lines.append(line)
    return lines


def _outcome(on: bool, outcome: str) -> str:
    code = "31;1" if outcome in ("denied", "error") else "32;1" if outcome == "mutated" else "1"
    return color(on, code, headline_outcome(outcome))


def _decision(out: TextIO, indent: str, before: Any, decision: Any, on: bool) -> None:
    for note in decision.notes:
        out.write(f"{indent}{color(on, '32', 'add ')} {note}\n")
    if decision.outcome == "mutated":
        for line in _diff(before, decision.pod, on):
            out.write(f"{indent}  {line}\n")


def explain(out: TextIO, where: str, record: dict[str, Any], decision: Any, before: Any, on: bool) -> None:
    """One document: headline, why or deny lines, each template, warnings."""
    kind = record.get("objectKind") or record.get("kind") or "(no kind)"
    ns = f"{record['namespace']}/" if record.get("namespace") else ""
    policy = f" by policy {record['policy']}" if record.get("policy") else ""
    out.write(
        f"{color(on, '1', where)}: {kind} {ns}{record.get('name') or '(unnamed)'}: "
        f"{_outcome(on, record['outcome'])}{policy}\n"
    )
    label = {"denied": color(on, "31", "deny"), "error": color(on, "31", "error")}.get(record["outcome"], "why:")
    for message in record["messages"]:
        out.write(f"  {label} {message}\n")
    if decision is not None and not decision.templates and record["outcome"] not in ("error", "not-checked"):
        _decision(out, "  ", before, decision, on)
    for t, result in zip(record["templates"], decision.templates if decision is not None else ()):
        by = f" by policy {t['policy']}" if t["policy"] else ""
        effect = ""
        if t["outcome"] == "denied":
            effect = " (denies the workload)" if t["deniesWorkload"] else f" (a warning only: {result.why_not})"
        out.write(f"  {color(on, '1', t['path'])}: its pods would be {_outcome(on, t['outcome'])}{by}{effect}\n")
        tlabel = color(on, "31", "deny") if t["outcome"] == "denied" else "why:"
        for message in t["messages"]:
            out.write(f"    {tlabel} {message}\n")
        _decision(out, "    ", result.pod, result.decision, on)
    told = tuple(record["messages"])
    for w in record["warnings"]:
        if told and w.startswith(told):  # the why line already says it
            continue
        out.write(f"  {color(on, '33', 'warn')} {w}\n")
    out.write("\n")
