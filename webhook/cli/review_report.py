"""What `rdma-webhook review` prints and the exit status it returns: one record per document (the
`--output json` line, schema in review-output.schema.json), told for people with `--explain`, the
AdmissionReview answer with `--output review`; bad input on stderr as it is met."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

from webhook.cli.common import EXIT_BAD_INPUT, EXIT_DENIED, EXIT_OK


def record_of(path: str, index: int, doc: Any) -> dict[str, Any]:
    """The `--output json` record of one document, before its outcome is known: what it names
    (an AdmissionReview by its request's object), then an error until `fill` says otherwise."""
    meta = doc.get("metadata") if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) else {}
    kind = doc.get("kind") if isinstance(doc, dict) else None
    object_kind = None
    namespace = meta.get("namespace")
    if kind == "AdmissionReview" and isinstance(doc.get("request"), dict):
        req = doc["request"]
        obj = req.get("object") if isinstance(req.get("object"), dict) else {}
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        object_kind = (req.get("kind") or {}).get("kind") if isinstance(req.get("kind"), dict) else None
        namespace = req.get("namespace") or meta.get("namespace")
    return {
        "file": path,
        "document": index,
        "kind": kind,
        "apiVersion": doc.get("apiVersion") if isinstance(doc, dict) else None,
        "objectKind": object_kind,
        "namespace": namespace,
        "name": meta.get("name") or meta.get("generateName"),
        "outcome": "error",
        "allowed": False,
        "policy": None,
        "rules": [],
        "messages": [],
        "warnings": [],
        "templates": [],
    }


def fill(record: dict[str, Any], allowed: bool, decision: Any, message: str) -> None:
    """The record of a decided document: outcome, policy, rules, messages (denials, else why it
    is left as it is), the decision's warnings in full, and each template's. `decision` None:
    not judged (the answer's `message` when it denies)."""
    record.update(allowed=allowed, warnings=list(decision.warnings) if decision is not None else [])
    if decision is None:
        record.update(
            outcome="denied" if not allowed else "skipped",
            messages=[message] if not allowed else ["not a pod or workload"],
        )
        return
    templates = decision.templates
    record.update(
        outcome=decision.outcome,
        policy=decision.policy,
        rules=sorted({f.rule for f in decision.denials}),
        messages=[f.text() for f in decision.denials],
    )
    record["templates"] = [
        {
            "path": t.path,
            "outcome": t.decision.outcome,
            "policy": t.decision.policy,
            "deniesWorkload": t.deny,
            "rules": sorted({f.rule for f in t.decision.denials}),
            "messages": [f.text() for f in t.decision.denials] or ([t.decision.reason] if t.decision.reason else []),
        }
        for t in templates
    ]
    if not allowed:
        record["outcome"] = "denied"
    elif templates and any(t.decision.outcome == "mutated" for t in templates):
        record["outcome"] = "mutated"  # a workload: its pods will be
    elif templates:
        record["outcome"] = "unchanged" if any(t.decision.outcome != "skipped" for t in templates) else "skipped"
    if record["outcome"] in ("unchanged", "skipped") and not record["messages"]:
        if templates:
            record["messages"] = [f"{t['path']}: {m}" for t in record["templates"] for m in t["messages"]]
        elif decision.reason:
            record["messages"] = [decision.reason]
    if record["outcome"] == "mutated":
        record["messages"] = []


class Report:
    """The records of a run, printed as each document is met (`--explain`, `--output review`)
    or at the end (`--output json`), and the exit status they add up to."""

    def __init__(self, output: str, explain: bool, color: bool):
        self.output, self.explain, self.color = output, explain, color
        self.records: list[dict[str, Any]] = []
        self.status = EXIT_OK

    def _told(self, where: str, record: dict[str, Any], decision: Any = None, before: Any = None) -> None:
        from webhook.cli.review_explain import explain

        explain(sys.stdout, where, record, decision, before, self.color)

    def bad(self, message: str, record: dict[str, Any] | None = None, where: str = "") -> None:
        """Bad input: said on stderr, exit status 2, and the document's record an error."""
        print(f"error: {message}", file=sys.stderr)
        self.status = EXIT_BAD_INPUT
        if record is not None:
            prefix = f"{where}: "
            record.update(
                outcome="error",
                allowed=False,
                messages=[message[len(prefix) :] if where and message.startswith(prefix) else message],
            )
            self.records.append(record)
            if self.explain:
                self._told(where or record["file"], record)

    def not_checked(self, where: str, record: dict[str, Any], line: str | None = None) -> None:
        """A document left alone (`line`: what `--output review` says of it on stderr)."""
        self.records.append(record)
        if self.explain:
            self._told(where, record)
        elif self.output == "review" and line is not None:
            print(line, file=sys.stderr)

    def judged(
        self, where: str, record: dict[str, Any], decision: Any, before: Any, answer: Callable[[], dict[str, Any]]
    ) -> None:
        """A judged document; `answer` makes its AdmissionReview answer, for `--output review` only."""
        self.records.append(record)
        if self.explain:
            self._told(where, record, decision, before)
        elif self.output == "review":
            sys.stdout.write(json.dumps(answer(), indent=2) + "\n")
        if not record["allowed"] and self.status == EXIT_OK:
            self.status = EXIT_DENIED

    def finish(self) -> int:
        if self.output == "json" and not self.explain:
            for record in self.records:
                sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
        return self.status
