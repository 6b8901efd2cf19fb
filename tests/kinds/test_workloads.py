"""In-process tests of webhook/kinds/workloads.py (issue 28, the kinds.workloads part of the mutation
run, mutation/MUTATION.md): where each workload kind keeps its pod templates, and which pod a
controller makes of each.

tests/kinds/test_workloads_validate.py checks that a bad template of each kind is denied with its path, and
tests/kinds/test_verdict.py drives every manifest of tests/manifests/ through the check; neither
looks at the pod a template is read as. The tests here do, through `expand` (what `/validate` and
`rdma-webhook review` judge), `templates`, `pod_from_template` and `group_of`, on objects shaped as
each project's documentation writes them:

- Argo: the pod the executor makes of a template (its container renamed `main`; a script's source
  read as `sh -c` / `python -c` for a shell or Python and appended to `args` otherwise, as the
  executor appends the file it writes; sidecars, init containers, the workflow's volumes and pod
  settings under the template's own; `podMetadata`, also in a CronWorkflow's `workflowSpec`), the
  template's name in its path, and the shapes Argo's default (schema-less) CRDs let through: a
  Workflow that references a WorkflowTemplate, items that are not templates, a script without
  source or command. The same code runs for WorkflowTemplate, ClusterWorkflowTemplate and
  CronWorkflow; Argo's templates are built when the table is built (at import), so a mutation
  run sees their mutants only through `mutation/mutation_verify.py`;
- AppWrapper podSets paths, in the grammar of AppWrapper's own `getValueAtPath` (fields, `[i]`
  indexes, consecutive indexes), and paths that lead nowhere finding nothing instead of raising;
- embedded objects (AppWrapper components, Argo resource manifests): a known kind read once by its
  own entry, a Pod as its own template, other core objects as none, the 256 KiB bound on text, Argo
  placeholders (also expressions that quote), a TrainJob created by a step read with the runtimes,
  namespace and Trainer release given, and the depth bound (8 levels below the top object, a Volcano
  CronJob's Job counting as one);
- Volcano CronJob, RayJob and RayService reading the object they hold; TrainJob's runtime reference
  and the note on each override field the Trainer release does not read; RoleBasedGroup roles;
  list items named by name, else groupName, else place; `group_of`; the pod a template makes
  (namespace, generateName after the owner, the template left unchanged for the next namespace).

Robustness cases (values that are not objects or lists) are those that reach the webhook: Argo's
CRDs keep no schema under `spec`, and `rdma-webhook review` reads files no API server has checked.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from kube_objects import container
from webhook.cluster.state import RuntimeStore
from webhook.core import keys
from webhook.kinds import trainer, workloads
from webhook.kinds.workloads import expand

INJECT = {keys.POD_INJECT: keys.POD_INJECT_TRUE}
ARGO = "argoproj.io"
IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"
MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"


@pytest.fixture(autouse=True)
def _trainer_release(monkeypatch):
    # the Trainer release a TrainJob is read under is the one given, else this setting's default
    monkeypatch.delenv(trainer.TRAINER_RELEASE_ENV, raising=False)


def documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def the(name: str, kind: str) -> dict:
    (doc,) = [d for d in documents(name) if d["kind"] == kind]
    return doc


def found(obj: dict, group: str | None = None) -> dict:
    """{path: template} of every pod template `expand` finds in a workload object."""
    group = workloads.group_of(obj["apiVersion"]) if group is None else group
    out = expand(obj, group, obj["kind"])
    paths = [p for p, _ in out.templates]
    assert len(paths) == len(set(paths)), paths
    return dict(out.templates)


# -- Argo Workflows: the pod the executor makes of each template ---------------------------------


def workflow(*templates: dict, kind: str = "Workflow", **spec) -> dict:
    """An Argo Workflow (or WorkflowTemplate, ClusterWorkflowTemplate) whose entrypoint is a DAG of the templates."""
    dag = {"name": "pipeline", "dag": {"tasks": [{"name": t["name"], "template": t["name"]} for t in templates]}}
    meta = {"generateName": "finetune-", "namespace": "ml-training"} if kind == "Workflow" else {"name": "finetune"}
    if kind not in ("ClusterWorkflowTemplate", "Workflow"):
        meta["namespace"] = "ml-training"
    return {
        "apiVersion": f"{ARGO}/v1alpha1",
        "kind": kind,
        "metadata": meta,
        "spec": {"entrypoint": "pipeline", "templates": [dag, *templates], **spec},
    }


def gpu_step(name: str = "train", **fields) -> dict:
    return {
        "name": name,
        "metadata": {"labels": dict(INJECT)},
        "container": {
            "image": IMAGE,
            "command": ["torchrun", "--nproc-per-node=8", "/workspace/train.py"],
            "resources": {"limits": {"nvidia.com/gpu": "8"}},
        },
        **fields,
    }


def script_step(command: list | None, source: str | None = "python /workspace/train.py", **script) -> dict:
    body: dict = {"image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "8"}}, **script}
    if command is not None:
        body["command"] = command
    if source is not None:
        body["source"] = source
    return {"name": "run", "metadata": {"labels": dict(INJECT)}, "script": body}


def main_container(wf: dict, name: str = "run") -> dict:
    pod = found(wf)[f"spec.templates[{name}]"]
    (main,) = [c for c in pod["spec"]["containers"] if c.get("name") == "main"]
    return main


@pytest.mark.parametrize("kind", ["Workflow", "WorkflowTemplate", "ClusterWorkflowTemplate"])
def test_a_container_template_is_one_pod_whose_container_is_named_main_at_the_templates_path(kind):
    step = gpu_step()
    step["container"]["name"] = "trainer"  # whatever the template calls it, the executor runs it as `main`
    pods = found(workflow(step, kind=kind))
    assert list(pods) == ["spec.templates[train]"]  # the DAG template makes no pod
    pod = pods["spec.templates[train]"]
    assert pod["spec"]["containers"] == [{**step["container"], "name": "main"}]
    assert pod["metadata"] == {"labels": INJECT}


@pytest.mark.parametrize(
    "interpreter",
    [
        "sh",
        "/bin/sh",
        "bash",
        "/usr/bin/bash",
        "dash",
        "/bin/dash",
        "zsh",
        "/usr/bin/zsh",
        "ash",
        "/bin/ash",
        "python",
        "python3",
        "/usr/local/bin/python3.12",
    ],
)
def test_a_script_run_by_a_shell_or_python_is_read_as_its_source_given_to_c(interpreter):
    source = "export NCCL_IB_DISABLE=1\npython /workspace/train.py\n"
    main = main_container(workflow(script_step([interpreter], source)))
    assert main["command"] == [interpreter] and main["args"] == ["-c", source]
    assert "source" not in main and main["image"] == IMAGE


def test_a_script_run_by_another_interpreter_gets_its_source_after_its_args_as_the_file_argo_writes():
    # Argo's docs: a `node` script; the executor appends the path of the file holding the source
    source = "var rand = Math.floor(Math.random() * 100);\nconsole.log(rand);\n"
    assert main_container(workflow(script_step(["node"], source)))["args"] == [source]
    with_args = main_container(workflow(script_step(["node"], source, args=["--max-old-space-size=4096"])))
    assert with_args["args"] == ["--max-old-space-size=4096", source]
    # a program whose name only contains a shell's is no shell
    assert main_container(workflow(script_step(["/opt/bashful/run"], source)))["args"] == [source]


def test_a_script_without_a_command_or_a_source_still_makes_its_pod():
    # Argo's default CRDs keep no schema for a template, so these reach the webhook as written
    assert main_container(workflow(script_step(None, "echo hi")))["args"] == ["echo hi"]
    no_source = main_container(workflow(script_step(["bash"], None, args=["/workspace/run.sh"])))
    assert no_source["command"] == ["bash"] and no_source["args"] == ["/workspace/run.sh"]
    # a command or args that are not lists are not read as lists
    assert main_container(workflow(script_step({"exec": "bash"}, "echo hi")))["args"] == ["echo hi"]
    assert main_container(workflow(script_step(["node"], "x()", args="--fast")))["args"] == ["x()"]


def test_a_container_set_makes_one_pod_of_its_containers_as_named():
    a = container("prepare", IMAGE, gpus=None, command=["python", "/workspace/prep.py"])
    b = container("train", IMAGE, command=["torchrun", "/workspace/train.py"])
    step = {"name": "set", "metadata": {"labels": dict(INJECT)}, "containerSet": {"containers": [a, b]}}
    assert found(workflow(step))["spec.templates[set]"]["spec"]["containers"] == [a, b]


def test_sidecars_init_containers_and_volumes_of_the_workflow_and_the_template_are_in_the_pod():
    sidecar = container("dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.1-ubuntu22.04", gpus=None)
    init = container("fetch", "amazon/aws-cli:2.17.0", gpus=None, command=["aws", "s3", "sync", "s3://data", "/data"])
    shared = {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}
    step = gpu_step(sidecars=[sidecar, "not a container"], initContainers=[init], volumes=[shm])
    pod = found(workflow(step, volumes=[shared]))["spec.templates[train]"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["main", "dcgm-exporter"] and pod["containers"][1] == sidecar
    assert pod["initContainers"] == [init]
    assert pod["volumes"] == [shared, shm]
    # either alone
    assert found(workflow(gpu_step(), volumes=[shared]))["spec.templates[train]"]["spec"]["volumes"] == [shared]
    assert found(workflow(gpu_step(volumes=[shm])))["spec.templates[train]"]["spec"]["volumes"] == [shm]
    bare = found(workflow(gpu_step()))["spec.templates[train]"]["spec"]
    assert set(bare) == {"containers"}


@pytest.mark.parametrize(
    "key, workflow_value, template_value",
    [
        ("securityContext", {"runAsNonRoot": True, "runAsUser": 8737}, {"runAsUser": 0}),
        (
            "nodeSelector",
            {"node.kubernetes.io/instance-type": "p5.48xlarge"},
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        ),
        (
            "tolerations",
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            [{"key": "rdma", "operator": "Exists", "effect": "NoSchedule"}],
        ),
        ("hostNetwork", True, False),
    ],
)
def test_pod_settings_of_the_workflow_apply_unless_the_template_sets_its_own(key, workflow_value, template_value):
    inherited = found(workflow(gpu_step(), **{key: workflow_value}))["spec.templates[train]"]["spec"]
    assert inherited[key] == workflow_value
    own = found(workflow(gpu_step(**{key: template_value}), **{key: workflow_value}))["spec.templates[train]"]["spec"]
    assert own[key] == template_value
    assert found(workflow(gpu_step(**{key: template_value})))["spec.templates[train]"]["spec"][key] == template_value


POD_METADATA = {"labels": {**INJECT, "team": "llm"}, "annotations": {"sidecar.istio.io/inject": "false"}}


def test_the_workflows_pod_metadata_is_under_each_templates_own():
    step = gpu_step()
    step["metadata"] = {"labels": {"team": "speech"}}
    pod = found(workflow(step, podMetadata=POD_METADATA))["spec.templates[train]"]
    assert pod["metadata"] == {
        "labels": {**INJECT, "team": "speech"},
        "annotations": {"sidecar.istio.io/inject": "false"},
    }


def test_a_cron_workflow_reads_templates_and_pod_settings_of_its_workflow_spec():
    step = gpu_step()
    del step["metadata"]
    spec = workflow(step, podMetadata=POD_METADATA, nodeSelector={"pool": "h100"})["spec"]
    cron = {
        "apiVersion": f"{ARGO}/v1alpha1",
        "kind": "CronWorkflow",
        "metadata": {"name": "nightly", "namespace": "ml-training"},
        "spec": {
            "schedules": ["0 2 * * *"],
            "concurrencyPolicy": "Replace",
            "nodeSelector": {"pool": "cpu"},
            "workflowSpec": spec,
        },
    }
    pods = found(cron)
    assert list(pods) == ["spec.workflowSpec.templates[train]"]
    pod = pods["spec.workflowSpec.templates[train]"]
    assert pod["metadata"] == POD_METADATA and pod["spec"]["nodeSelector"] == {"pool": "h100"}


def test_each_template_is_named_by_its_name_in_its_path():
    wf = workflow(gpu_step("prepare"), gpu_step("train"))
    assert list(found(wf)) == ["spec.templates[prepare]", "spec.templates[train]"]


@pytest.mark.parametrize(
    "spec",
    [
        {"workflowTemplateRef": {"name": "finetune"}, "arguments": {"parameters": [{"name": "lr", "value": "3e-4"}]}},
        {"workflowTemplateRef": {"name": "finetune"}, "templates": None},
        {"templates": {"name": "train"}},
        {"templates": 7},
    ],
)
def test_a_workflow_without_a_list_of_templates_has_no_pods_and_raises_nothing(spec):
    wf = {"apiVersion": f"{ARGO}/v1alpha1", "kind": "Workflow", "metadata": {"generateName": "finetune-"}, "spec": spec}
    assert found(wf) == {}


@pytest.mark.parametrize("workflow_spec", [None, "templates: []", [{"name": "train"}], 3])
def test_a_cron_workflow_whose_workflow_spec_is_no_object_has_no_pods_and_raises_nothing(workflow_spec):
    # Argo's default CRDs keep no schema under spec: the API server lets any value through
    cron = {
        "apiVersion": f"{ARGO}/v1alpha1",
        "kind": "CronWorkflow",
        "metadata": {"name": "nightly", "namespace": "ml-training"},
        "spec": {"schedules": ["0 2 * * *"], "workflowSpec": workflow_spec},
    }
    assert expand(cron, ARGO, "CronWorkflow").templates == []


def test_an_item_that_is_not_a_template_is_skipped_not_the_ones_after_it():
    wf = workflow(gpu_step())
    wf["spec"]["templates"][1:1] = ["train", None, 3, ["x"]]
    assert list(found(wf)) == ["spec.templates[train]"]


def test_a_template_that_runs_no_container_makes_no_pod():
    steps = [
        {"name": "wait", "suspend": {"duration": "10m"}},
        {"name": "notify", "http": {"url": "https://hooks.example/done", "method": "POST"}},
        {"name": "empty-set", "containerSet": {"containers": None}},
        {"name": "odd", "container": "python", "script": ["bash"]},
    ]
    assert found(workflow(*steps)) == {}


# -- AppWrapper podSets: paths in the grammar of AppWrapper's getValueAtPath ---------------------


def appwrapper(template: dict, *paths: str) -> dict:
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "wrapped", "namespace": "ml-training"},
        "spec": {"components": [{"podSets": [{"replicas": 1, "path": p} for p in paths], "template": template}]},
    }


def pod_template(name: str) -> dict:
    return {
        "metadata": {"labels": dict(INJECT)},
        "spec": {"restartPolicy": "Never", "containers": [container(name, IMAGE)]},
    }


def pipeline() -> dict:
    """A kind this table does not know, with pod templates in a list of lists (stages of steps)."""
    return {
        "apiVersion": "pipelines.example.com/v1",
        "kind": "StagedPipeline",
        "metadata": {"name": "p"},
        "spec": {
            "stages": [
                [{"template": pod_template("s0a")}],
                [{"template": pod_template("s1a")}, {"template": pod_template("s1b")}],
            ],
            "roles": [{"pods": {"template": pod_template("r0")}}, {"pods": {"template": pod_template("r1")}}],
            "byName": {"leader": {"template": pod_template("leader")}},
        },
    }


def test_pod_set_paths_follow_fields_indexes_and_consecutive_indexes():
    p = pipeline()
    aw = appwrapper(
        p,
        "template.spec.stages[1][1].template",
        "template.spec.stages[0][0].template",
        "template.spec.roles[1].pods.template",
        "template.spec.byName.leader.template",
    )
    pods = found(aw)
    stage = p["spec"]["stages"]
    assert pods == {
        "spec.components[0].template.spec.stages[1][1].template": stage[1][1]["template"],
        "spec.components[0].template.spec.stages[0][0].template": stage[0][0]["template"],
        "spec.components[0].template.spec.roles[1].pods.template": p["spec"]["roles"][1]["pods"]["template"],
        "spec.components[0].template.spec.byName.leader.template": p["spec"]["byName"]["leader"]["template"],
    }


@pytest.mark.parametrize(
    "path",
    [
        "template.spec.roles[2].pods.template",  # one past the end
        "template.spec.stages[2][0].template",
        "template.spec.stages[1][2].template",
        "template.spec.roles[-1].pods.template",  # AppWrapper refuses negative and named indexes
        "template.spec.roles[x].pods.template",
        "template.spec.roles[].pods.template",
        "template.spec.roles.pods.template",  # a list read as a mapping
        "template.spec.roles.0.pods.template",
        "template.spec.byName[0].template",  # a mapping read as a list
        "template.spec.byName.leader.template[0]",
        "template.spec.byName.follower.template",  # absent
        "template.spec.stages[0].template",  # a list where the template should be
    ],
)
def test_a_pod_set_path_that_leads_to_no_template_finds_nothing_and_raises_nothing(path):
    assert found(appwrapper(pipeline(), path)) == {}


# -- embedded objects: AppWrapper components and Argo resource steps ------------------------------


def resource_step(manifest: str | dict, name: str = "launch") -> dict:
    text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest, sort_keys=False)
    return {"name": name, "resource": {"action": "create", "setOwnerReference": True, "manifest": text}}


def test_an_appwrapper_reads_a_known_kind_by_its_own_entry_once_and_a_service_not_at_all():
    aw = the("allowed/appwrapper.yaml", "AppWrapper")  # a PyTorchJob with its podSets, and a Service
    job = aw["spec"]["components"][0]["template"]["spec"]["pytorchReplicaSpecs"]
    out = expand(aw, "workload.codeflare.dev", "AppWrapper")
    assert out.templates == [
        ("spec.components[0].template.spec.pytorchReplicaSpecs.Master.template", job["Master"]["template"]),
        ("spec.components[0].template.spec.pytorchReplicaSpecs.Worker.template", job["Worker"]["template"]),
    ]
    assert out.notes == [] and out.unresolved == []


def test_a_wrapped_or_created_pod_is_its_own_template():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nccl-check", "labels": dict(INJECT)},
        "spec": {
            "restartPolicy": "Never",
            "containers": [container("check", IMAGE, command=["all_reduce_perf", "-b", "8", "-e", "8G"])],
        },
    }
    expected = {"metadata": pod["metadata"], "spec": pod["spec"]}
    aw = appwrapper(pod, "template")
    assert found(aw) == {"spec.components[0].template": expected}
    assert found(workflow(resource_step(pod))) == {"spec.templates[launch].resource.manifest": expected}
    # other objects of the core group are no pods, whatever their spec holds
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "tb"},
        "spec": {"selector": {"app": "tb"}, "ports": [{"port": 6006}]},
    }
    config = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": pod_template("x")}
    assert found(workflow(resource_step(service), resource_step(config, "config"))) == {}


def pytorchjob_text(padding: int = 0) -> str:
    job = the("denied/argo-resource-step.yaml", "WorkflowTemplate")["spec"]["templates"][0]["resource"]["manifest"]
    return job + "#" * padding


def test_an_embedded_manifest_of_up_to_256_kib_is_read_and_a_longer_one_is_named_in_a_note():
    limit = 256 * 1024
    path = "spec.templates[launch].resource.manifest"
    at_limit = pytorchjob_text(limit - len(pytorchjob_text()))
    assert len(at_limit) == limit
    out = expand(workflow(resource_step(at_limit)), ARGO, "Workflow")
    assert [p for p, _ in out.templates] == [f"{path}.spec.pytorchReplicaSpecs.Worker.template"] and out.notes == []
    out = expand(workflow(resource_step(at_limit + "#")), ARGO, "Workflow")
    assert out.templates == [] and out.notes == [f"{path}: over 256 KiB of text, not checked"]


def test_argo_placeholders_in_a_manifest_are_read_as_the_text_they_stand_for():
    # unquoted `{{...}}` is no YAML; Argo fills it in when the step runs. An expression may quote.
    indent = " " * 12  # the PyTorchJob's container fields
    text = (
        pytorchjob_text()
        .replace("replicas: 4", "replicas: {{inputs.parameters.workers}}")
        .replace(f"\n{indent}env:\n", f"\n{indent}args: [--lr, {{{{=inputs.parameters['lr']}}}}]\n{indent}env:\n")
        .replace('value: "1"', "value: {{inputs.parameters.ib-disable}}")
    )
    assert "args: [--lr, {{=inputs.parameters['lr']}}]" in text and "replicas: {{inputs" in text
    out = expand(workflow(resource_step(text)), ARGO, "Workflow")
    assert out.notes == []
    ((path, template),) = out.templates
    assert path == "spec.templates[launch].resource.manifest.spec.pytorchReplicaSpecs.Worker.template"
    c = template["spec"]["containers"][0]
    assert c["args"] == ["--lr", "{{=inputs.parameters['lr']}}"]
    assert c["env"] == [{"name": "NCCL_IB_DISABLE", "value": "{{inputs.parameters.ib-disable}}"}]


@pytest.mark.parametrize(
    "text",
    [
        "kind: [unclosed",
        "kind: [unclosed {{inputs.parameters.kind}}",
        "apiVersion: v1\nkind: Pod\nspec: {{inputs.parameters.spec}} {{",
    ],
)
def test_a_manifest_that_is_no_yaml_even_with_its_placeholders_read_is_named_in_a_note(text):
    out = expand(workflow(resource_step(text)), ARGO, "Workflow")
    assert out.templates == [] and out.notes == [
        "spec.templates[launch].resource.manifest: not valid YAML, not checked"
    ]


def test_a_trainjob_created_by_a_workflow_step_is_read_with_the_runtimes_namespace_and_release_given():
    runtime = the("allowed/trainjob-own-runtime.yaml", "TrainingRuntime")  # deepspeed-erdma, in ml-training
    job = copy.deepcopy(the("allowed/trainjob-own-runtime.yaml", "TrainJob"))
    del job["spec"]["runtimePatches"]
    job["spec"]["podTemplateOverrides"] = [{"targetJobs": [{"name": "node"}], "metadata": {"labels": {"team": "moe"}}}]
    wf = workflow(resource_step(job, "train"))
    runtimes = RuntimeStore([runtime])
    out = expand(wf, ARGO, "Workflow", runtimes, "ml-training", release="v2.1")
    where = "spec.templates[train].resource.manifest.TrainingRuntime/deepspeed-erdma"
    pods = dict(out.templates)
    assert list(pods) == [f"{where} replicatedJobs[launcher]", f"{where} replicatedJobs[node]"]
    assert pods[f"{where} replicatedJobs[node]"]["metadata"]["labels"] == {
        **INJECT,
        "team": "moe",
    }  # v2.1 reads the overrides
    assert out.notes == [] and out.unresolved == []
    # under the default release the overrides are not read, and a note says so
    out = expand(wf, ARGO, "Workflow", runtimes, "ml-training")
    assert dict(out.templates)[f"{where} replicatedJobs[node]"]["metadata"]["labels"] == INJECT
    assert out.notes == [
        f"spec.podTemplateOverrides is not read by Trainer {trainer.DEFAULT_TRAINER_RELEASE} "
        "(the release this check models), so it is ignored"
    ]
    # the runtime is looked up in the namespace given, with the runtimes given
    assert expand(wf, ARGO, "Workflow", runtimes, "other").unresolved == [
        "runtime TrainingRuntime 'deepspeed-erdma' in namespace 'other' is not known, so the pods of this TrainJob cannot be checked"
    ]
    assert expand(wf, ARGO, "Workflow", None, "ml-training").unresolved == [
        "runtime TrainingRuntime 'deepspeed-erdma' in namespace 'ml-training' cannot be looked up here, "
        "so the pods of this TrainJob cannot be checked"
    ]


def test_workflows_that_create_workflows_are_followed_eight_levels_below_the_first():
    def chain(levels: int) -> dict:
        wf = workflow(gpu_step())
        for _ in range(levels - 1):
            wf = workflow(resource_step(wf, "next"))
        return wf

    inner = "spec.templates[next].resource.manifest."
    assert list(found(chain(9))) == [inner * 8 + "spec.templates[train]"]
    assert found(chain(10)) == {}


def test_an_embedded_object_without_an_api_version_is_no_workload_and_raises_nothing():
    job = yaml.safe_load(pytorchjob_text())
    del job["apiVersion"]
    out = expand(workflow(resource_step(job)), ARGO, "Workflow")
    assert out.templates == [] and out.notes == []


@pytest.mark.parametrize(
    "api_version, group",
    [
        ("batch/v1", "batch"),
        ("kubeflow.org/v2beta1", "kubeflow.org"),
        ("v1", ""),
        ("", ""),
        (None, ""),
        (1, ""),
        ({"group": "batch"}, ""),
        ({"/": "batch"}, ""),
        (["batch/v1"], ""),
    ],
)
def test_the_group_is_what_precedes_the_version_and_nothing_for_the_core_group_or_no_string(api_version, group):
    assert workloads.group_of(api_version) == group


def test_an_api_version_with_more_than_one_slash_names_no_kind_of_the_table():
    # no API group has a "/" (the API server refuses such an apiVersion): "batch/v1/x" is no batch/v1 Job
    assert not workloads.is_workload(workloads.group_of("batch/v1/x"), "Job")
    assert workloads.is_workload(workloads.group_of("batch/v1"), "Job")


# -- RoleBasedGroup roles -------------------------------------------------------------------------


def rbg_role(**fields) -> dict:
    rbg = copy.deepcopy(the("allowed/rolebasedgroup.yaml", "RoleBasedGroup"))
    role = rbg["spec"]["roles"][2]  # decode: a template, no leaderWorkerSet
    role.update(fields)
    rbg["spec"]["roles"] = [role]
    return rbg


def test_a_role_reads_its_leader_and_worker_patches_only_when_its_leader_worker_set_is_an_object():
    rbg = rbg_role()
    template = rbg["spec"]["roles"][0]["template"]
    assert found(rbg) == {"spec.roles[decode].template": template}
    # `rdma-webhook review` reads files no API server has checked against the CRD's schema
    for odd in (None, "LeaderWorkerSet", ["size", 2], 2):
        assert found(rbg_role(leaderWorkerSet=odd)) == {"spec.roles[decode].template": template}, odd
    both = found(
        rbg_role(leaderWorkerSet={"size": 2, "patchWorkerTemplate": {"metadata": {"labels": {"role": "worker"}}}})
    )
    assert list(both) == [
        "spec.roles[decode].leaderWorkerSet.patchLeaderTemplate",
        "spec.roles[decode].leaderWorkerSet.patchWorkerTemplate",
    ]
    assert both["spec.roles[decode].leaderWorkerSet.patchLeaderTemplate"] == template
    assert both["spec.roles[decode].leaderWorkerSet.patchWorkerTemplate"]["metadata"]["labels"] == {
        **INJECT,
        "role": "worker",
    }


# -- TrainJob: the runtime it references, and the override fields of each Trainer release ---------


def trainjob(ref: dict, **spec) -> dict:
    job = copy.deepcopy(the("allowed/trainjob.yaml", "TrainJob"))  # llama-finetune on torch-distributed
    job["spec"]["runtimeRef"] = ref
    job["spec"].update(spec)
    return job


def cluster_runtime() -> dict:
    rt = copy.deepcopy(the("allowed/trainjob-own-runtime.yaml", "TrainingRuntime"))
    rt["kind"] = "ClusterTrainingRuntime"
    rt["metadata"] = {"name": "torch-distributed"}
    return rt


TRAINJOB = (trainer.TRAINER_GROUP, "TrainJob")


def test_a_trainjob_finds_its_pods_in_the_cluster_runtime_it_names_by_default():
    runtimes = RuntimeStore([cluster_runtime()])
    out = expand(trainjob({"name": "torch-distributed"}), *TRAINJOB, runtimes, "ml-training")
    assert [p for p, _ in out.templates] == [
        "ClusterTrainingRuntime/torch-distributed replicatedJobs[launcher]",
        "ClusterTrainingRuntime/torch-distributed replicatedJobs[node]",
    ]
    assert out.unresolved == [] and out.notes == []


@pytest.mark.parametrize(
    "ref, says",
    [
        (
            {"name": "torch-distributed", "kind": "ClusterTrainingRuntimes"},
            "spec.runtimeRef names runtime ClusterTrainingRuntimes 'torch-distributed', not a TrainingRuntime or ClusterTrainingRuntime",
        ),
        (
            {"name": "torch-distributed", "kind": "TrainJob"},
            "spec.runtimeRef names runtime TrainJob 'torch-distributed', not a TrainingRuntime or ClusterTrainingRuntime",
        ),
        (
            {"name": ""},
            "spec.runtimeRef names runtime ClusterTrainingRuntime '', not a TrainingRuntime or ClusterTrainingRuntime",
        ),
        (
            {"name": "torch-fsdp"},
            "runtime ClusterTrainingRuntime 'torch-fsdp' is not known, so the pods of this TrainJob cannot be checked",
        ),
        (
            {"name": "torch-distributed", "kind": "TrainingRuntime"},
            "runtime TrainingRuntime 'torch-distributed' in namespace 'ml-training' is not known, so the pods of this TrainJob cannot be checked",
        ),
    ],
)
def test_a_trainjob_whose_runtime_cannot_be_found_says_why_and_has_no_pods(ref, says):
    # the runtime store knows a ClusterTrainingRuntime of the name, which only a right reference finds
    out = expand(trainjob(ref), *TRAINJOB, RuntimeStore([cluster_runtime()]), "ml-training")
    assert out.templates == [] and out.unresolved == [says] and out.notes == []


def test_without_runtimes_a_trainjobs_cluster_runtime_cannot_be_looked_up():
    out = expand(trainjob({"name": "torch-distributed"}), *TRAINJOB, None, "ml-training")
    assert out.templates == [] and out.unresolved == [
        "runtime ClusterTrainingRuntime 'torch-distributed' cannot be looked up here, so the pods of this TrainJob cannot be checked"
    ]


OVERRIDE_FIELDS = {
    "podSpecOverrides": [
        {
            "targetJobs": [{"name": "node"}],
            "containers": [{"name": "node", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}],
        }
    ],
    "podTemplateOverrides": [{"targetJobs": [{"name": "node"}], "metadata": {"labels": {"team": "llm"}}}],
    "runtimePatches": [
        {
            "manager": "platform.example/scheduling",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": "h100"}}}}},
                            }
                        ]
                    }
                }
            },
        }
    ],
}


@pytest.mark.parametrize("release", trainer.TRAINER_RELEASES)
@pytest.mark.parametrize("field", sorted(OVERRIDE_FIELDS))
def test_a_trainjob_notes_each_override_field_the_release_does_not_read(field, release):
    job = trainjob({"name": "torch-distributed"}, **{field: OVERRIDE_FIELDS[field]})
    out = expand(job, *TRAINJOB, RuntimeStore([cluster_runtime()]), "ml-training", release)
    read = trainer.OVERRIDES[release] == field
    assert out.notes == (
        []
        if read
        else [f"spec.{field} is not read by Trainer {release} (the release this check models), so it is ignored"]
    )
    assert len(out.templates) == 2


# -- objects of another kind inside a workload: Volcano CronJob, RayJob, RayService ---------------


def test_a_volcano_cron_job_reads_the_job_it_makes_under_its_job_template():
    cron = the("allowed/volcano-cronjob.yaml", "CronJob")
    tasks = cron["spec"]["jobTemplate"]["spec"]["tasks"]
    assert found(cron) == {
        "spec.jobTemplate.spec.tasks[master].template": tasks[0]["template"],
        "spec.jobTemplate.spec.tasks[worker].template": tasks[1]["template"],
    }


def test_a_ray_job_reads_its_cluster_spec_as_a_ray_clusters_spec_and_its_submitter():
    rayjob = copy.deepcopy(the("allowed/rayjob.yaml", "RayJob"))
    submitter = {
        "spec": {"restartPolicy": "Never", "containers": [container("submitter", "rayproject/ray:2.46.0", gpus=None)]}
    }
    rayjob["spec"]["submitterPodTemplate"] = submitter
    cluster = rayjob["spec"]["rayClusterSpec"]
    assert found(rayjob) == {
        "spec.rayClusterSpec.headGroupSpec.template": cluster["headGroupSpec"]["template"],
        "spec.rayClusterSpec.workerGroupSpecs[gpu-workers].template": cluster["workerGroupSpecs"][0]["template"],
        "spec.submitterPodTemplate": submitter,
    }
    service = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "llm", "namespace": "ml-training"},
        "spec": {"serveConfigV2": "applications: []", "rayClusterConfig": cluster},
    }
    assert list(found(service)) == [
        "spec.rayClusterConfig.headGroupSpec.template",
        "spec.rayClusterConfig.workerGroupSpecs[gpu-workers].template",
    ]


def test_the_depth_bound_counts_a_cron_jobs_job_as_one_level():
    cron = the("allowed/volcano-cronjob.yaml", "CronJob")

    def chain(levels: int) -> dict:  # `levels` workflows, the last creating the CronJob
        wf = workflow(resource_step(cron, "cron"))
        for _ in range(levels - 1):
            wf = workflow(resource_step(wf, "next"))
        return wf

    inner = "spec.templates[next].resource.manifest."
    # the seventh workflow is 6 levels below the first, its CronJob 7, the Job 8: read; one more is not
    assert list(found(chain(7))) == [
        inner * 6 + "spec.templates[cron].resource.manifest.spec.jobTemplate.spec.tasks[master].template",
        inner * 6 + "spec.templates[cron].resource.manifest.spec.jobTemplate.spec.tasks[worker].template",
    ]
    assert found(chain(8)) == {}


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"template": "x"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "q"},
            "spec": {"clusterQueue": "c"},
        },
    ],
)
def test_a_kind_the_table_does_not_know_has_no_templates(obj):
    assert not workloads.is_workload(workloads.group_of(obj["apiVersion"]), obj["kind"])
    assert expand(obj, workloads.group_of(obj["apiVersion"]), obj["kind"]).templates == []
    assert list(workloads.templates(obj, workloads.group_of(obj["apiVersion"]), obj["kind"])) == []


@pytest.mark.parametrize("kind", sorted(workloads.TEMPLATES), ids="/".join)
@pytest.mark.parametrize("obj", [None, "spec: {}", [{"spec": {}}]])
def test_an_object_that_is_no_mapping_has_no_templates_whatever_its_kind(kind, obj):
    out = expand(obj, *kind, RuntimeStore([cluster_runtime()]), "ml-training")
    assert (out.templates, out.unresolved, out.notes) == ([], [], [])


def test_templates_are_those_expand_finds_without_runtimes():
    wf = workflow(
        gpu_step("prepare"),
        resource_step(
            the("denied/argo-resource-step.yaml", "WorkflowTemplate")["spec"]["templates"][0]["resource"]["manifest"]
        ),
    )
    assert list(workloads.templates(wf, ARGO, "Workflow")) == expand(wf, ARGO, "Workflow").templates
    assert [p for p, _ in workloads.templates(wf, ARGO, "Workflow")] == [
        "spec.templates[prepare]",
        "spec.templates[launch].resource.manifest.spec.pytorchReplicaSpecs.Worker.template",
    ]


def test_a_trainjob_without_a_namespace_looks_its_training_runtime_up_in_none():
    out = expand(
        trainjob({"name": "deepspeed-erdma", "kind": "TrainingRuntime"}),
        *TRAINJOB,
        RuntimeStore([the("allowed/trainjob-own-runtime.yaml", "TrainingRuntime")]),
    )
    assert out.templates == [] and out.unresolved == [
        "runtime TrainingRuntime 'deepspeed-erdma' in namespace '' is not known, so the pods of this TrainJob cannot be checked"
    ]


def test_a_resource_step_without_a_manifest_does_not_stop_the_ones_after_it():
    job_text = pytorchjob_text()
    from_artifact = {
        "name": "from-artifact",
        "inputs": {"artifacts": [{"name": "job", "path": "/tmp/job.yaml"}]},
        "resource": {"action": "create", "manifestFrom": {"artifact": {"name": "job"}}},
    }
    delete = {"name": "cleanup", "resource": {"action": "delete", "flags": ["pytorchjob", "--selector", "app=train"]}}
    odd = {"name": "odd", "resource": "kubectl create -f job.yaml"}
    wf = workflow(from_artifact, delete, odd, resource_step(job_text))
    assert list(found(wf)) == ["spec.templates[launch].resource.manifest.spec.pytorchReplicaSpecs.Worker.template"]


@pytest.mark.parametrize(
    "pod_sets",
    [
        [{"replicas": 1}],
        [{"replicas": 1, "path": ""}],
        [{"replicas": 1, "path": 3}],
        [{"replicas": 1, "path": None}],
        ["template.spec.roles[0].pods.template"],
        None,
        "template.spec.roles[0].pods.template",
    ],
)
def test_pod_sets_without_a_usable_path_find_nothing_and_raise_nothing(pod_sets):
    aw = appwrapper(pipeline())
    aw["spec"]["components"][0]["podSets"] = pod_sets
    assert found(aw) == {}


# -- paths: items of a list are named by their name, else groupName, else their place --------------


def volcano_job(tasks: list) -> dict:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "mpi", "namespace": "ml-training"},
        "spec": {
            "minAvailable": 3,
            "schedulerName": "volcano",
            "plugins": {"ssh": [], "svc": []},
            "tasks": [{"replicas": 1, "template": pod_template(f"t{i}"), **t} for i, t in enumerate(tasks)],
        },
    }


def test_a_list_item_without_a_usable_name_is_named_by_its_place():
    job = volcano_job([{"name": "mpimaster"}, {}, {"name": ""}, {"name": 7}, {"name": None, "groupName": "workers"}])
    assert list(found(job)) == [
        "spec.tasks[mpimaster].template",
        "spec.tasks[1].template",
        "spec.tasks[2].template",
        "spec.tasks[3].template",
        "spec.tasks[workers].template",
    ]


# -- the pod a controller makes of a template ------------------------------------------------------


def test_a_template_makes_a_pod_in_the_namespace_given_named_after_its_owner():
    template = pod_template("trainer")
    template["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": "trainer"}
    before = copy.deepcopy(template)
    pod = workloads.pod_from_template(template, "ml-training", "llama-finetune")
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "labels": INJECT,
            "annotations": template["metadata"]["annotations"],
            "namespace": "ml-training",
            "generateName": "llama-finetune-",
        },
        "spec": template["spec"],
    }
    assert template == before  # the workload is not changed


def test_one_template_makes_a_pod_in_each_namespace_it_is_judged_in():
    # a cluster-scoped runtime's template is judged in the example namespace of each policy
    template = pod_template("node")
    first = workloads.pod_from_template(template, "ns-erdma", "torch-distributed")
    second = workloads.pod_from_template(template, "ns-ib", "torch-distributed")
    assert (first["metadata"]["namespace"], second["metadata"]["namespace"]) == ("ns-erdma", "ns-ib")
    assert template["metadata"] == {"labels": INJECT}


def test_a_wrapped_pod_keeps_its_name_and_namespace():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nccl-check", "namespace": "ml-training", "labels": dict(INJECT)},
        "spec": {"restartPolicy": "Never", "containers": [container("check", IMAGE)]},
    }
    ((path, template),) = expand(appwrapper(pod), "workload.codeflare.dev", "AppWrapper").templates
    made = workloads.pod_from_template(template, "ml-training", "wrapped")
    assert made["metadata"] == pod["metadata"] and made["spec"] == pod["spec"]
    unnamed = workloads.pod_from_template(
        {**template, "metadata": {**pod["metadata"], "name": ""}}, "ml-training", "wrapped"
    )
    assert unnamed["metadata"]["generateName"] == "wrapped-"


@pytest.mark.parametrize("template", [None, "template", ["spec"], 3])
def test_a_template_that_is_no_object_is_judged_as_it_is(template):
    assert workloads.pod_from_template(template, "ml-training", "train") == template


@pytest.mark.parametrize("metadata", [None, "labels", ["x"]])
def test_a_template_whose_metadata_is_no_object_makes_a_pod_with_that_metadata(metadata):
    spec = pod_template("x")["spec"]
    pod = workloads.pod_from_template({"metadata": metadata, "spec": spec}, "ml-training", "train")
    assert pod == {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    assert workloads.pod_from_template({"spec": spec}, "ml-training", "train")["metadata"] is None


@pytest.mark.parametrize(
    "command", [["bash"], ["bash", "-e"], ["bash", "-ex"], ["/bin/sh", "-e"], ["/usr/bin/env", "bash"]]
)
def test_an_argo_script_with_options_after_its_shell_is_read_as_its_script(command, policies):
    """Argo's executor runs `command args /argo/staging/script`: with `[bash, -e]` the shell
    still reads the source, so an export in it is what the pod runs with (before: the last word,
    the option, was taken as the interpreter and the source was never read, and the
    fallback was allowed)."""
    from webhook.kinds.verdict import check_workload
    from webhook.core.decision import Namespace

    wf = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "nccl", "namespace": "ml"},
        "spec": {
            "entrypoint": "train",
            "templates": [
                {
                    "name": "train",
                    "metadata": {"labels": {keys.POD_INJECT: keys.POD_INJECT_TRUE}},
                    "script": {
                        "image": "nvcr.io/nvidia/pytorch:25.11-py3",
                        "command": command,
                        "source": "export NCCL_IB_DISABLE=1\ntorchrun --nproc_per_node=8 train.py\n",
                        "resources": {"limits": {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}},
                    },
                }
            ],
        },
    }
    ns = Namespace("ml", {keys.NS_INJECTION: keys.NS_INJECTION_ENABLED, keys.NS_POLICY: "ib-shared"})
    v = check_workload(wf, "argoproj.io", "Workflow", ns, policies, None)
    assert v.outcome == "denied" and "NCCL_IB_DISABLE" in v.message(), (v.outcome, v.message())


@pytest.mark.parametrize("command", [["python3"], ["python3", "-u"], ["/usr/bin/env", "python3"]])
def test_an_argo_python_script_with_options_is_read_as_python(command):
    from webhook.kinds.workloads import expand

    wf = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "py", "namespace": "ml"},
        "spec": {
            "templates": [
                {
                    "name": "t",
                    "script": {
                        "image": "python:3.12",
                        "command": command,
                        "source": "import os\nos.environ['NCCL_IB_DISABLE'] = '1'\n",
                    },
                }
            ]
        },
    }
    [(_, template)] = expand(wf, "argoproj.io", "Workflow", None, "ml", None).templates
    [main] = template["spec"]["containers"]
    assert main["command"] == command and main["args"] == ["-c", "import os\nos.environ['NCCL_IB_DISABLE'] = '1'\n"]
