"""docker-compose.yml, checked without a Docker engine: the Compose Specification's JSON schema
(vendored, see tests/fixtures/compose-spec.README.md) plus the structure the issue asks for.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
SCHEMA_FILE = REPO / "tests" / "fixtures" / "compose-spec.json"
DJANGO_SERVICES = ("web", "celery", "runner")
# What the production settings read; each must be set for every Django process.
REQUIRED_ENV = (
    "DJANGO_SETTINGS_MODULE",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "DATABASE_URL",
    "REDIS_URL",
    "SPARK_MASTER",
    "STATE_DIR",
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft201909Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft201909Validator.check_schema(schema)
    return jsonschema.Draft201909Validator(
        schema, format_checker=jsonschema.Draft201909Validator.FORMAT_CHECKER
    )


def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


def test_compose_file_is_valid_against_the_compose_specification(
    compose: dict[str, Any], validator: jsonschema.Draft201909Validator
) -> None:
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_the_schema_catches_a_misspelt_key(
    compose: dict[str, Any], validator: jsonschema.Draft201909Validator
) -> None:
    broken = json.loads(json.dumps(compose))
    broken["services"]["web"]["dependson"] = ["postgres"]  # a typo Compose would reject
    assert not validator.is_valid(broken)


def test_every_service_of_the_production_shape_exists(compose: dict[str, Any]) -> None:
    names = set(services(compose))
    assert {"postgres", "redis", "nats", "web", "celery", "spark-master", "runner"} <= names
    assert len([n for n in names if n.startswith("spark-worker")]) == 2


def test_web_celery_and_runner_reuse_the_one_django_definition() -> None:
    # Compose the YAML without constructing it: an alias is the very node it points at.
    root = yaml.compose(COMPOSE_FILE.read_text())
    assert isinstance(root, yaml.MappingNode)
    top = {key.value: value for key, value in root.value}
    django_node = top["x-django"]
    service_nodes = {key.value: value for key, value in top["services"].value}
    for name in DJANGO_SERVICES:
        merged = [v for k, v in service_nodes[name].value if k.value == "<<"]
        assert merged and merged[0] is django_node, f"{name} does not merge x-django"
    # ...and the Django environment is written once in the file.
    assert COMPOSE_FILE.read_text().count("DJANGO_SETTINGS_MODULE:") == 1


def test_django_services_run_one_built_image_with_the_same_environment(
    compose: dict[str, Any],
) -> None:
    svc = services(compose)
    images = {svc[name]["image"] for name in DJANGO_SERVICES}
    assert images == {"rescaler:latest"}
    assert svc["web"]["build"]["context"] == "."
    assert (REPO / svc["web"]["build"]["dockerfile"]).is_file()
    environments = [svc[name]["environment"] for name in DJANGO_SERVICES]
    assert all(env == environments[0] for env in environments)


def test_every_depends_on_target_exists_and_health_conditions_have_healthchecks(
    compose: dict[str, Any],
) -> None:
    svc = services(compose)
    for name, service in svc.items():
        depends = service.get("depends_on", {})
        targets = depends if isinstance(depends, dict) else {name: {} for name in depends}
        for target, spec in targets.items():
            assert target in svc, f"{name} depends on unknown service {target}"
            if spec.get("condition") == "service_healthy":
                assert "healthcheck" in svc[target], f"{target} has no healthcheck"


def test_every_setting_the_django_processes_need_is_set(compose: dict[str, Any]) -> None:
    settings_source = "\n".join(
        p.read_text() for p in (REPO / "rescaler" / "settings").glob("*.py")
    )
    for name in DJANGO_SERVICES:
        env = services(compose)[name]["environment"]
        for variable in REQUIRED_ENV:
            assert env.get(variable), f"{name} lacks {variable}"
            if variable != "DJANGO_SETTINGS_MODULE":
                # Guard against drift: the settings must actually read this variable.
                assert f'"{variable}"' in settings_source, f"settings never read {variable}"
        assert env["DJANGO_SETTINGS_MODULE"] == "rescaler.settings.production"


def test_service_urls_point_at_services_of_this_file(compose: dict[str, Any]) -> None:
    svc = services(compose)
    env = svc["web"]["environment"]
    assert urlsplit(env["DATABASE_URL"]).hostname in svc
    assert urlsplit(env["REDIS_URL"]).hostname in svc
    master = urlsplit(env["SPARK_MASTER"])
    assert (master.scheme, master.hostname, master.port) == ("spark", "spark-master", 7077)
    assert "7077" in svc["spark-master"]["command"]
    for worker in ("spark-worker-1", "spark-worker-2"):
        assert "spark://spark-master:7077" in svc[worker]["command"]


def test_runner_drives_the_configured_pipeline_on_the_spark_master(
    compose: dict[str, Any],
) -> None:
    runner = services(compose)["runner"]
    assert runner["command"] == ["python", "manage.py", "run_pipeline"]
    # run_pipeline's --pipeline defaults to RESCALER_PIPELINE: clickstream unless the user's
    assert runner["environment"]["RESCALER_PIPELINE"] == "${RESCALER_PIPELINE:-clickstream}"
    assert runner["environment"]["SPARK_MASTER"] == "spark://spark-master:7077"
    assert {"spark-master", "postgres", "redis"} <= set(runner["depends_on"])


def test_nats_serves_jetstream_on_a_volume_to_the_runner(compose: dict[str, Any]) -> None:
    svc = services(compose)
    nats = svc["nats"]
    assert nats["image"] == "nats:2.10"
    command = nats["command"]
    assert "-js" in command  # JetStream: the nats:STREAM source needs it
    assert not {"-p", "--port"} & set(command)  # NATS's own port, 4222
    store = command[command.index("-sd") + 1]
    mounts = [v.split(":") for v in nats["volumes"]]
    assert any(name in compose["volumes"] and path == store for name, path in mounts)
    runner = svc["runner"]
    assert "nats" in runner["depends_on"]
    url = urlsplit(runner["environment"]["RESCALER_NATS_URL"])
    assert (url.scheme, url.hostname, url.port) == ("nats", "nats", 4222)


def test_runner_takes_its_source_and_sink_from_the_environment(compose: dict[str, Any]) -> None:
    env = services(compose)["runner"]["environment"]
    # passed through, empty when unset: the runner then uses the pipeline's own
    assert env["RESCALER_SOURCE"] == "${RESCALER_SOURCE:-}"
    assert env["RESCALER_SINK"] == "${RESCALER_SINK:-}"
    # Guard against drift: the runner must actually read these variables.
    runner_source = "\n".join(
        (REPO / "workers" / name).read_text() for name in ("cli.py", "config.py")
    )
    for variable in ("RESCALER_SOURCE", "RESCALER_SINK", "RESCALER_NATS_URL"):
        assert f'"{variable}"' in runner_source, f"the runner never reads {variable}"


def test_no_volume_is_shared_between_the_runner_and_the_spark_workers(
    compose: dict[str, Any],
) -> None:
    """Each Spark worker keeps its executors' stores on a volume of its own (RESCALER_LOCAL_DIR);
    the runner's state directory is its own (issue 45, "Deployment")."""
    svc = services(compose)
    state_dir = svc["runner"]["environment"]["STATE_DIR"]
    assert f"state:{state_dir}" in svc["runner"]["volumes"]
    workers = ("spark-worker-1", "spark-worker-2")
    runner_side = {
        v.split(":")[0] for n in ("runner", "web", "celery") for v in svc[n].get("volumes", [])
    }
    own = []
    for name in workers:
        local_dir = svc[name]["environment"]["RESCALER_LOCAL_DIR"]
        volumes = [v.split(":") for v in svc[name]["volumes"]]
        assert [path for _, path in volumes] == [local_dir], name
        assert volumes[0][0] not in runner_side, f"{name} shares {volumes[0][0]} with the runner"
        own.append(volumes[0][0])
    assert len(set(own)) == len(workers), "each worker has its own disk"
    assert any(v.endswith(":/var/lib/postgresql/data") for v in svc["postgres"]["volumes"])


def test_dockerfile_builds_python_311_with_java_17_and_spark_python_set() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, re.MULTILINE)
    assert "openjdk-17-jdk-headless" in dockerfile  # javac builds the pinning class
    assert "python -m workers.pinning" in dockerfile and "RESCALER_JVM_DIR" in dockerfile
    assert "requirements.lock" in dockerfile
    for variable in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME"):
        assert variable in dockerfile


def test_transfers_and_snapshots_go_to_the_object_store_service(compose: dict[str, Any]) -> None:
    """The durable location and the snapshots are in MinIO, which every process reaches with
    the same credentials; no volume carries them between the runner and the workers."""
    svc = services(compose)
    assert "minio" in svc and "minio-bucket" in svc
    env = svc["runner"]["environment"]
    for variable in ("RESCALER_DURABLE_LOCATION", "RESCALER_RECOVERY_DIR"):
        uri = env[variable].removeprefix(f"${{{variable}:-").removesuffix("}")
        parts = urlsplit(uri)
        assert parts.scheme == "s3", f"{variable}: {uri}"
        assert "endpoint_override=minio:9000" in parts.query, f"{variable}: {uri}"
    for name in ("runner", "web", "celery", "spark-worker-1", "spark-worker-2"):
        creds = svc[name]["environment"]
        assert creds["AWS_ACCESS_KEY_ID"] and creds["AWS_SECRET_ACCESS_KEY"], name
        assert "minio-bucket" in svc[name]["depends_on"], name
        assert not any("recovery" in v for v in svc[name].get("volumes", [])), name
    runner_source = (REPO / "workers" / "config.py").read_text()
    assert '"RESCALER_DURABLE_LOCATION"' in runner_source
