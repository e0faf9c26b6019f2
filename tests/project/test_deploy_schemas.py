"""deploy/'s compose file and Kubernetes manifests, validated against their published JSON
schemas: the Compose Specification's, and Kubernetes' own (strict: an unknown field is an
error). The schemas are test data in tests/data/schemas/ (no network here); its README
says where each came from. The custom resources (PodMonitor, KEDA's ScaledObject) have
no schema in any package we can install: their envelope (apiVersion, kind, and
metadata against Kubernetes' ObjectMeta) is checked here, their ``spec`` by
tests/project/test_deploy.py."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from .. import promql

DEPLOY = promql.ROOT / "deploy"
K8S = DEPLOY / "k8s"
SCHEMAS = Path(__file__).parents[1] / "data" / "schemas"
KUBERNETES = SCHEMAS / "kubernetes-v1.37.0"

# The schema file (in KUBERNETES) of each built-in kind the manifests use.
KIND_SCHEMAS = {
    ("apps/v1", "Deployment"): "deployment-apps-v1.json",
    ("v1", "Service"): "service-v1.json",
    ("v1", "Secret"): "secret-v1.json",
}
# Custom resources: their operators publish no JSON schema in a package (see the module
# docstring); only the envelope is checked.
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("keda.sh/v1alpha1", "ScaledObject"),
}
DEFINITIONS_ID = "https://kubernetes.io/api/_definitions.json"


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())


@cache
def kubernetes_registry() -> Registry:
    definitions = Resource.from_contents(load_json(KUBERNETES / "_definitions.json"))
    return Registry().with_resource(DEFINITIONS_ID, definitions)


def errors(schema: dict[str, Any], document: Any, registry: Registry | None = None) -> list[str]:
    """Every violation of ``schema`` in ``document``, as ``path: message`` lines."""
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema, registry=registry or Registry())
    return [
        f"{'/'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in sorted(validator.iter_errors(document), key=lambda e: list(e.path))
    ]


def envelope_schema(api_version: str, kind: str) -> dict[str, Any]:
    """apiVersion, kind and Kubernetes' ObjectMeta, for a custom resource."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": {
                "$ref": f"{DEFINITIONS_ID}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
            },
            "spec": {"type": "object"},
        },
        "additionalProperties": False,
    }


def manifest_errors(document: dict[str, Any]) -> list[str]:
    key = (document.get("apiVersion"), document.get("kind"))
    if key in KIND_SCHEMAS:
        schema = load_json(KUBERNETES / KIND_SCHEMAS[key])
    elif key in CUSTOM_KINDS:
        schema = envelope_schema(*key)
    else:
        return [f"no schema for {key}: add it to tests/data/schemas/ and KIND_SCHEMAS"]
    return errors(schema, document, kubernetes_registry())


def compose_errors(document: Any) -> list[str]:
    return errors(load_json(SCHEMAS / "compose" / "compose-spec.json"), document)


def compose_file() -> Any:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def manifests() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}#{index}", doc)
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for index, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if doc
    ]


def test_the_compose_file_follows_the_compose_specification():
    assert compose_errors(compose_file()) == []


@pytest.mark.parametrize(("name", "document"), [pytest.param(*m, id=m[0]) for m in manifests()])
def test_each_kubernetes_manifest_follows_its_kinds_schema(name, document):
    assert manifest_errors(document) == [], name


def test_every_manifest_is_of_a_kind_with_a_schema_here():
    kinds = {(doc["apiVersion"], doc["kind"]) for _, doc in manifests()}
    assert kinds <= KIND_SCHEMAS.keys() | CUSTOM_KINDS, kinds - KIND_SCHEMAS.keys() - CUSTOM_KINDS
    # The built-in kinds are checked in full, not only their envelope.
    assert {("apps/v1", "Deployment"), ("v1", "Service"), ("v1", "Secret")} <= kinds


# -- the checks fail on a broken file --------------------------------------------------------


def test_a_compose_file_with_a_misspelt_or_mistyped_key_fails_validation():
    broken = copy.deepcopy(compose_file())
    broken["services"]["worker"]["stop_grace_periode"] = "45s"
    broken["services"]["rabbitmq"]["ports"] = "5672:5672"
    found = compose_errors(broken)
    assert any("stop_grace_periode" in line for line in found), found
    assert any(line.startswith("services/rabbitmq/ports") for line in found), found


def test_a_deployment_with_a_misspelt_field_or_a_wrong_type_fails_validation():
    (deployment,) = [doc for _, doc in manifests() if doc["kind"] == "Deployment"]
    broken = copy.deepcopy(deployment)
    pod = broken["spec"]["template"]["spec"]
    pod["terminationGracePeriod"] = pod.pop("terminationGracePeriodSeconds")
    pod["containers"][0]["ports"][0]["containerPort"] = "9100"
    found = manifest_errors(broken)
    assert any("terminationGracePeriod" in line for line in found), found
    port = "spec/template/spec/containers/0/ports/0/containerPort"
    assert any(line.startswith(port) for line in found), found


def test_a_custom_resource_with_bad_metadata_fails_validation():
    (monitor,) = [doc for _, doc in manifests() if doc["kind"] == "PodMonitor"]
    broken = copy.deepcopy(monitor)
    broken["metadata"]["lables"] = broken["metadata"].pop("labels")
    assert any("lables" in line for line in manifest_errors(broken))


def test_a_manifest_of_an_unknown_kind_is_not_passed_silently():
    assert manifest_errors({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}) != []
