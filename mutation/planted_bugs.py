"""Plant each bug of this table in a fresh copy of the checkout, one at a time, and run the tests
that must catch it: a test that stays green with its bug planted cannot fail for that reason.

    .venv/bin/python mutation/planted_bugs.py [--only NAME,...] [--json out.json]   (`make planted`)

Each copy holds the tracked and untracked files of the work tree (not the ignored ones, so no
compiled extension: the copy runs interpreted) and is put first on PYTHONPATH; pytest runs as
`python -P -m pytest` from the copy. The named tests first run on the unplanted copy and must
pass there, so a plant only counts when it turns them red. A plant whose text is no longer in
the source is reported as stale (the code moved on: update the table). The `pure` mode stands for
`make test-pure` in a checkout that holds compiled extensions: the copy gets this checkout's
extensions and a build/pure copy of the source without them, PYTHONPATH=build/pure and
RDMA_WEBHOOK_EXPECT=pure. Exit status 1 when any plant was not caught.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Plant:
    name: str
    finding: str  # what issue 18 found weak
    path: str
    old: str
    new: str
    tests: list[str]
    mode: str = "plain"  # or "pure"


PLANTS = [
    Plant(
        "core-imports-upward",
        "issue 23: nothing held the layers; the core could reach the HTTP layer",
        "webhook/core/decision.py",
        '    """The pod\'s name, or its generateName with a `*` (controller-made pods have no name yet)."""\n',
        '    """The pod\'s name, or its generateName with a `*` (controller-made pods have no name yet)."""\n'
        "    from webhook.serving.admissions import MAX_BODY  # noqa: F401\n",
        [
            "tests/project/test_layers.py::test_no_module_imports_upward_or_sideways",
            "tests/project/test_layers.py::test_the_core_imports_nothing_from_the_adapters",
        ],
    ),
    Plant(
        "gpu-many-allowed",
        "a labelled pod asking for \"many\" GPUs was allowed without RDMA",
        "webhook/core/targets.py",
        "                if count < 0:\n                    return -1\n",
        "                if count < 0:\n                    continue\n",
        ["tests/admission/test_review_bad_input.py::test_a_gpu_count_that_is_not_a_quantity_is_denied_as_malformed"],
    ),
    Plant(
        "cpu-container-targeted",
        "the null-field pods were only checked for 'HTTP 200 and a uid'",
        "webhook/core/targets.py",
        "        if gpus > 0:\n",
        "        if gpus >= 0:\n",
        ["tests/admission/test_review_bad_input.py::test_missing_or_null_fields_read_as_absent"],
    ),
    Plant(
        "non-ascii-label-malformed",
        "the unicode label was sliced to plain ASCII",
        "webhook/core/decision.py",
        "(not isinstance(value, dict) or not k8s.all_str(value.values()))",
        "(not isinstance(value, dict) or not k8s.all_str(value.values()) or not all(v.isascii() for v in value.values()))",
        ["tests/admission/test_review_bad_input.py::test_unicode_and_control_characters"],
    ),
    Plant(
        "patch-bool-is-int",
        "tests/core/test_patch.py had an `if ...: pass`",
        "webhook/core/patch.py",
        "    if type(a) is not type(b) or a != b:\n        return False",
        "    if a != b:\n        return False",
        ["tests/core/test_patch.py::test_a_changed_type_is_one_replace"],
    ),
    Plant(
        "match-condition-label",
        "tests/deploy/test_kustomize.py checked a string the test itself defines",
        "webhook/core/keys.py",
        'POD_INJECT: Final = PREFIX + "inject"',
        'POD_INJECT: Final = PREFIX + "enable"',
        ["tests/deploy/test_kustomize.py::test_match_conditions_check_the_pod_label"],
    ),
    Plant(
        "tls10-allowed",
        "the TLS-version test passed with the server's minimum at TLS 1.0",
        "webhook/serving/tls.py",
        "ctx.minimum_version = ssl.TLSVersion.TLSv1_2",
        "ctx.minimum_version = ssl.TLSVersion.TLSv1",
        ["tests/serving/test_server.py::test_the_serving_context_refuses_tls11_for_its_version"],
    ),
    Plant(
        "head-limit-raised",
        "tests/serving/test_worker.py sized its input from the limit it tests",
        "webhook/serving/worker.py",
        "MAX_HEAD = 64 * 1024",
        "MAX_HEAD = 256 * 1024",
        ["tests/serving/test_worker.py::test_an_oversized_request_head_gets_431"],
    ),
    Plant(
        "drain-without-pause",
        "a timing bound of tests/serving/test_worker.py failed under load",
        "webhook/serving/worker.py",
        "call_later(DRAIN_IDLE, self.timeout_keep_alive_handler)",
        "call_later(0, self.timeout_keep_alive_handler)",
        [
            "tests/serving/test_worker.py::test_stop_answers_the_next_request_with_close_and_closes_idle_connections_after_a_pause"
        ],
    ),
    Plant(
        "watch-without-backoff",
        "a timing bound of tests/cluster/test_api.py could fail under load",
        "webhook/cluster/informer.py",
        "delay = min(delay * 2, owner.backoff_max)",
        "delay = 0.0",
        ["tests/cluster/test_api.py::test_watch_failures_back_off"],
    ),
    Plant(
        "list-keeps-last-page",
        "issue 28: the fake API server ignored limit/continue, so a list that kept only its last page passed",
        "webhook/cluster/informer.py",
        "            for obj in doc.get(\"items\") or ():\n                items[self.key(obj)] = self.value(obj)\n",
        "            items = {}\n            for obj in doc.get(\"items\") or ():\n                items[self.key(obj)] = self.value(obj)\n",
        [
            "tests/cluster/test_api.py::test_a_list_in_pages_keeps_every_page",
            "tests/cluster/test_api.py::test_an_expired_continue_token_lists_again_from_the_start",
        ],
    ),
    Plant(
        "stale-after-one-failure",
        "issue 28: the stale-cache rule was tested with a 0.3 s bound that passed with the threshold at 1",
        "webhook/cluster/informer.py",
        "        if self.failures < STALE_FAILURES or self.failing_since is None:",
        "        if self.failures < 1 or self.failing_since is None:",
        ["tests/cluster/test_api.py::test_fewer_failures_than_the_threshold_never_make_the_cache_unready"],
    ),
    Plant(
        "crash-masked-as-400",
        "the answer-checker accepted the app's masked-crash answer",
        "webhook/admission/review.py",
        'raise BadReview("request body is not a JSON object (expected an AdmissionReview)")',
        'raise TypeError("planted")',
        ["tests/serving/test_server_hostile.py::test_unreadable_and_odd_bodies[null]"],
    ),
    Plant(
        "pure-run-serves-compiled",
        "the served tests of `make test-pure` ran the compiled core",
        "tests/conftest.py",
        'CLI = [sys.executable, "-P", "-m", "webhook"]',
        'CLI = [sys.executable, "-m", "webhook"]',
        [
            "tests/project/test_build.py::test_subprocesses_run_the_core_under_test",
            "tests/kinds/test_workloads_validate.py::test_validate_over_tls",
        ],
        mode="pure",
    ),
    # issue 28: one plant per class of what slipped through (a table entry, a syntax variant, a merge precedence)
    Plant(
        "hydra-flag-missing",
        "issue 28: a flag missing from one launcher's flag table (its argument taken for the program, its -genv lost)",
        "webhook/commands/launchers.py",
        '    "-ppn": "arg",\n    "-perhost": "arg",\n',
        '    "-perhost": "arg",\n',
        [
            "tests/core/test_decision_tables.py::test_each_documented_flag_with_an_argument_is_in_the_table_and_read[hydra-mpiexec.hydra-ppn]"
        ],
    ),
    Plant(
        "shell-lc-not-a-script",
        "issue 28: a shell started with combined options (bash -lc) was not read as a script",
        "webhook/commands/invocation.py",
        '                if letter == "c":\n                    with_c = True\n',
        '                if letter == "c" and w in ("-c", "-ec", "-xc", "-exc", "-euxc", "-ce"):\n                    with_c = True\n',
        [
            "tests/commands/test_reader_syntax_properties.py::test_each_documented_option_form_reads_the_script[-lc-bash]",
            "tests/commands/test_reader_syntax_properties.py::test_any_option_cluster_with_c_reads_the_script",
        ],
    ),
    Plant(
        "merge-base-value-wins",
        "issue 28: merges were tested only where base and patch do not conflict",
        "webhook/kinds/merge.py",
        "                out[k] = strategic_merge(out.get(k), v, k)\n",
        '                out[k] = out[k] if k == "value" and k in out else strategic_merge(out.get(k), v, k)\n',
        [
            "tests/commands/test_reader_syntax_properties.py::test_strategic_merge_patch_wins_for_every_field",
            "tests/commands/test_reader_syntax_properties.py::test_trainjob_overrides_win_over_the_runtime",
            "tests/commands/test_reader_syntax_properties.py::test_rolebasedgroup_patches_win_over_the_role_template",
        ],
    ),
    # issue 27 item 3 (GKE): the merge of GKE multi-networking's annotation, the fit named, gIB's fallback
    Plant(
        "gke-annotation-clobbered",
        "issue 27: a pod's own GKE interfaces replaced by the policy's",
        "webhook/fabrics/gke.py",
        "    value = json.dumps(entries + new_entries, ",
        "    value = json.dumps([e for e in entries if e[\"network\"] == DEFAULT_NETWORK] + new_entries, ",
        [
            "tests/fabrics/test_gke.py::test_plan_reuses_the_pods_own_names_and_avoids_taken_ones",
            "tests/fabrics/test_gke.py::test_fitting_policy_admits_cleanly[a3ultra-gib-pods.yaml]",
        ],
    ),
    Plant(
        "gke-interface-taken",
        "issue 27: a policy network given an interface name the pod already uses",
        "webhook/fabrics/multus.py",
        "    iface = wanted if wanted and wanted not in taken else \"\"\n",
        "    iface = wanted or \"\"\n",
        ["tests/fabrics/test_gke.py::test_plan_reuses_the_pods_own_names_and_avoids_taken_ones"],
    ),
    Plant(
        "gke-network-of-another-fabric",
        "issue 27: a pod listing another policy's GKE networks admitted",
        "webhook/core/families.py",
        "    if foreign:\n",
        "    if foreign and False:\n",
        [
            "tests/fabrics/test_gke.py::test_never_a_second_nic_and_denied_naming_the_fit[erdma-a3mega-tcpxo-job.yaml]",
            "tests/fabrics/test_gke.py::test_denials_say_why_under_another_fabric",
        ],
    ),
    # issue 43 "Why", first bullet: NVIDIA network-operator's host device with its own Multus network,
    # in a namespace of another fabric, its NAD unknown to the state (issue 42's NIC work changed that path)
    Plant(
        "hostdev-family-forgotten",
        "issue 43: a network-operator host device whose NAD the state does not know got eRDMA on top, not a mismatch",
        "webhook/fabrics/transports.py",
        '("openshift.io/", "intel.com/", "nvidia.com/hostdev", "nvidia.com/rdma")',
        '("openshift.io/", "intel.com/", "nvidia.com/rdma")',
        [
            "tests/core/test_families.py::"
            "test_an_operator_device_with_its_network_whose_nad_is_unknown_is_another_fabrics_under_erdma",
        ],
    ),
    Plant(
        "gib-socket-allowed",
        "issue 27: NCCL_NET=gIB was read as a fallback; the opposite slip, Socket as gIB",
        "webhook/fabrics/transports.py",
        "GIB: tuple[Signature, ...] = (\n    Signature(\n"
        '        "NCCL_NET", DENY, _nccl_net, "NCCL src/plugin/net.cc ncclNetInit; Google\'s set_nccl_env.sh (NCCL_NET=gIB)"\n'
        "    ),\n",
        "GIB: tuple[Signature, ...] = (\n",
        [
            "tests/fabrics/test_gke.py::test_gib_signatures[NCCL_NET-Socket-True]",
            "tests/core/test_decision_tables.py::test_each_documented_signature_is_in_its_transports_table[gib]",
        ],
    ),
    # issue 28, the shell reader's misreadings of bash words: each fix reverted
    Plant(
        "ansi-c-escape-not-known",
        "issue 28: $'\\x31' (bash: 1) was not known, so `export NCCL_IB_DISABLE=$'\\x31'` was not judged",
        "webhook/commands/shell.py",
        "            return [ansi_c(body)]",
        "            return [None]",
        [
            "tests/commands/test_reader_syntax_properties.py::test_ansi_c_escapes_are_decoded",
            "tests/commands/test_reader_syntax_properties.py::test_every_quoting_of_name_value_is_what_bash_reads",
        ],
    ),
    Plant(
        "blank-string-dropped",
        "issue 28: a double-quoted string of blanks only (\" \") was read as ''",
        "webhook/commands/shell.py",
        "            if end > pos:\n                parts.append(in_double_quotes(self.raw(pos, end)))",
        "            if end > pos and self.src[pos:end].strip():\n                parts.append(in_double_quotes(self.raw(pos, end)))",
        [
            "tests/commands/test_reader_syntax_properties.py::test_blank_double_quoted_string_is_kept",
            "tests/commands/test_reader_syntax_properties.py::test_every_quoting_of_name_value_gives_the_value",
        ],
    ),
    Plant(
        "escaped-blank-first-dropped",
        "issue 28: `NAME=\\ a` was read as 'a' (tree-sitter skips the escaped blank)",
        "webhook/commands/shell.py",
        "                value.append(unquoted(self.raw(start, value_node.start_byte)))",
        "                pass",
        [
            "tests/commands/test_reader_syntax_properties.py::test_escaped_blanks_are_kept",
            "tests/commands/test_reader_syntax_properties.py::test_every_quoting_of_name_value_gives_the_value",
        ],
    ),
    Plant(
        "escape-after-quote-dropped",
        "issue 28: `export NCCL_IB_DISABLE='0'\\1` (bash: 01, IB off) was read as 0 and the pod admitted",
        "webhook/commands/shell.py",
        "                if i < n and following == p:\n                    parts.extend(self.piece(pieces[i], subs, depth))\n",
        "                if i < n and following == p:\n"
        "                    if pieces[i].text[:1] != b\"\\\\\":  # the escaped piece glued after a quote, dropped\n"
        "                        parts.extend(self.piece(pieces[i], subs, depth))\n",
        [
            "tests/commands/test_reader_syntax_properties.py::test_an_escape_after_a_quoted_string_is_kept",
            "tests/commands/test_reader_syntax_properties.py::test_an_escape_after_a_quoted_string_is_judged",
        ],
    ),
    # issue 43, the classes `make test` did not catch
    Plant(
        "cel-cap-prefix-ignored",
        "issue 43: the generated policy read IPC_LOCK only without CAP_ (the runtime reads both): it denied a "
        "pod adding CAP_IPC_LOCK and admitted one dropping it; only make e2e evaluated the CEL",
        "webhook/policy/cel.py",
        "x.upperAscii() in ['IPC_LOCK', 'CAP_IPC_LOCK']",
        "x.upperAscii() in ['IPC_LOCK']",
        [
            "tests/policy/test_admission_policy_cel.py::test_the_generated_policy_refuses_what_the_webhook_refuses[sriov-roce]",
            "tests/policy/test_admission_policy_cel.py::test_the_generated_policy_refuses_what_the_webhook_refuses[efa]",
        ],
    ),
    Plant(
        "cel-first-env-entry-read",
        "issue 43: the generated policy reading the first env entry of a name, where the kubelet uses the last",
        "webhook/policy/cel.py",
        'i = f"n.lastIndexOf({cel_str(name)})"',
        'i = f"n.indexOf({cel_str(name)})"',
        [
            "tests/policy/test_admission_policy_cel.py::test_the_generated_policy_refuses_what_the_webhook_refuses[ib-shared]",
        ],
    ),
    Plant(
        "cel-match-condition-without-pod-rules",
        "issue 43: the match condition (which lets the API server skip the validations) leaving out the pod's "
        "rules (hostNetwork, networks, sidecar): a later webhook's change there admitted without a word",
        "webhook/policy/admission_policy.py",
        "    if by_over[POD]:  # the pod's rules first",
        "    if False:  # the pod's rules first",
        [
            "tests/policy/test_admission_policy_cel.py::test_the_generated_policy_refuses_what_the_webhook_refuses[sriov-roce]",
        ],
    ),
    Plant(
        "env-list-substring-membership",
        "issue 43: a user's OMPI_MCA_mca_base_env_list naming NCCL_NET_GDR_LEVEL counted as naming NCCL_NET "
        "(a membership test turned into a substring test), so NCCL_NET reached no rank",
        "webhook/core/ranks.py",
        "            if name not in listed:\n",
        '            if name not in ";".join(listed):\n',
        [
            "tests/core/test_ranks_forwarding.py::test_a_user_variable_whose_name_begins_with_a_block_name_does_not_stand_for_it",
        ],
    ),
    Plant(
        "chart-lookup-result-ignored",
        "issue 43: the chart's certificate test held whenever lookup found nothing, which under helm template is always",
        "charts/rdma-webhook/templates/webhookconfigurations.yaml",
        '{{- $old := (get (default (dict) $existing) "data") | default (dict) -}}',
        "{{- $old := dict -}}",
        ["tests/deploy/test_chart.py::test_chart_certificates_are_kept_from_the_existing_secret"],
    ),
    Plant(
        "chart-lookup-removed",
        "issue 43: the same, with the lookup itself gone",
        "charts/rdma-webhook/templates/webhookconfigurations.yaml",
        '{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName -}}',
        "{{- $existing := dict -}}",
        ["tests/deploy/test_chart.py::test_chart_certificates_are_kept_from_the_existing_secret"],
    ),
]


def copy_checkout(dest: Path, compiled: bool) -> None:
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        src, dst = ROOT / name, dest / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, dst)
    if compiled:
        for so in [*ROOT.glob("*__mypyc.*.so"), *(ROOT / "webhook").rglob("*.so")]:
            shutil.copy2(so, dest / so.relative_to(ROOT))


def run_tests(copy: Path, plant: Plant) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RDMA_WEBHOOK_EXPECT")}
    if plant.mode == "pure":
        pure = copy / "build" / "pure"
        shutil.rmtree(pure, ignore_errors=True)
        shutil.copytree(copy / "webhook", pure / "webhook", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        (pure / "policies").symlink_to("../../policies")
        env.update(PYTHONPATH=str(pure), RDMA_WEBHOOK_EXPECT="pure")
    else:
        env["PYTHONPATH"] = str(copy)
    out = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *plant.tests],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    why = next((line[1:].strip() for line in lines if line.startswith("E ")), "")  # the first assertion line
    return out.returncode, (lines[-1] if lines else out.stderr[-300:]) + (f" | {why[:160]}" if why else "")


def check(plant: Plant, work: Path) -> dict:
    copy = work / plant.name
    copy_checkout(copy, compiled=plant.mode == "pure")
    target = copy / plant.path
    text = target.read_text()
    if text.count(plant.old) != 1:
        return {
            "name": plant.name,
            "verdict": "stale",
            "detail": f"{plant.path}: the text to replace occurs {text.count(plant.old)} times",
        }
    code, last = run_tests(copy, plant)
    if code != 0:
        return {"name": plant.name, "verdict": "broken", "detail": f"fails without the bug (exit {code}): {last}"}
    target.write_text(text.replace(plant.old, plant.new))
    start = time.monotonic()
    code, last = run_tests(copy, plant)
    verdict = "caught" if code == 1 else "MISSED" if code == 0 else "error"
    return {
        "name": plant.name,
        "verdict": verdict,
        "exit": code,
        "detail": last,
        "seconds": round(time.monotonic() - start, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated plant names")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    chosen = [p for p in PLANTS if not args.only or p.name in args.only.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="rdma-webhook-planted-") as tmp:
        for plant in chosen:
            r = check(plant, Path(tmp))
            results.append({**r, "finding": plant.finding, "file": plant.path, "tests": plant.tests})
            print(f"{r['verdict']:7s} {plant.name:26s} {r['detail']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["verdict"] == "caught" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
