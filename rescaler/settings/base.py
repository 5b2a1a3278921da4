"""Settings shared by every environment. Values that differ between machines come from the
environment (see docs/configuration.md); local/test/production adjust what they must.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from rescaler.dbsetup import DEFAULT_DATABASE_URL
from rescaler.preflight import DEFAULT_REDIS_URL
from workers.state import DEFAULT_BACKEND

from .env import (
    database_config,
    env_bool,
    env_float,
    env_list,
    env_lockout_parameters,
    env_rate,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = BASE_DIR / "var"


DEBUG = env_bool("DEBUG", False)
# Overridden per environment; production reads it with no default.
SECRET_KEY = env_str("SECRET_KEY", "")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# --- the services -------------------------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL", DEFAULT_DATABASE_URL)
DATABASES = {"default": database_config(DATABASE_URL)}
REDIS_URL = env_str("REDIS_URL", DEFAULT_REDIS_URL)

# --- the data plane -----------------------------------------------------------------------------
# Spark master URL for the pipeline runner: local[N] by default, spark://host:7077 on a cluster.
SPARK_MASTER = env_str("SPARK_MASTER", "local[2]")
# Root of the state stores, hold queues and checkpoints; shared by the runner and Spark workers.
STATE_DIR = Path(env_str("STATE_DIR", str(VAR_DIR / "state")))
# The state store backend (lmdb or rocksdb): the API reads keys with the backend the runner
# writes them with, so both read this variable, and an empty one means the default for both.
RESCALER_STATE_BACKEND = env_str("RESCALER_STATE_BACKEND", "") or DEFAULT_BACKEND
# Where the runner writes snapshots (empty: "recovery" beside STATE_DIR, as the runner does);
# the console and the API list them from there (rescaler/cluster/snapshots.py).
RESCALER_RECOVERY_DIR = env_str("RESCALER_RECOVERY_DIR", "")
# The runner is reported down when its last heartbeat is older than this.
RESCALER_HEARTBEAT_STALE_S = env_float("RESCALER_HEARTBEAT_STALE_S", 30.0)
# A step whose phase has not changed for this long makes the orchestrator cancel the operation.
RESCALER_STEP_TIMEOUT_S = env_float("RESCALER_STEP_TIMEOUT_S", 300.0)
# a read that finds Postgres gone waits this long for it before answering 503 (rescaler/dbwait.py)
RESCALER_DB_WAIT_S = env_float("RESCALER_DB_WAIT_S", 10.0)
# One Celery run drives an operation this long, then re-queues itself (no message stays
# unacknowledged for long); its lease lets another worker take over once it expires.
RESCALER_DRIVE_BUDGET_S = env_float("RESCALER_DRIVE_BUDGET_S", 60.0)
RESCALER_LEASE_S = env_float("RESCALER_LEASE_S", 15.0)
# A dry run's plan_id starts its plan for this long (docs/api.md, "A binding dry run").
RESCALER_PLAN_TTL_S = env_float("RESCALER_PLAN_TTL_S", 900.0)
# A pipeline in recommend or auto mode is evaluated by the autoscaler at most once per this
# many seconds, queued by its epochs (docs/autoscaling.md, "When the autoscaler decides").
RESCALER_AUTOSCALING_INTERVAL_S = env_float("RESCALER_AUTOSCALING_INTERVAL_S", 10.0)
# The workers the autoscaler asks the worker provider for must join (their PUs bootstrapped)
# within this many seconds, or the decision fails (docs/autoscaling.md, "Workers").
RESCALER_AUTOSCALING_WORKER_JOIN_S = env_float("RESCALER_AUTOSCALING_WORKER_JOIN_S", 300.0)
# A preemption notice (POST /api/v1/workers/<name>/notice) cordons the worker; "drain" also
# drains it at once with priority, "cordon" leaves that to an operator. A notice without a
# deadline gives the worker this long (docs/elastic-workers.md, "Preemption").
RESCALER_PREEMPTION_POLICY = env_str("RESCALER_PREEMPTION_POLICY", "drain")
if RESCALER_PREEMPTION_POLICY not in ("drain", "cordon"):
    raise ImproperlyConfigured(
        f"RESCALER_PREEMPTION_POLICY must be 'drain' or 'cordon', not {RESCALER_PREEMPTION_POLICY!r}"
    )
RESCALER_PREEMPTION_DEADLINE_S = env_float("RESCALER_PREEMPTION_DEADLINE_S", 120.0)

# --- Django -------------------------------------------------------------------------------------
INSTALLED_APPS = [
    # daphne first: its runserver serves ASGI (websockets) in development.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # whitenoise's runserver_nostatic before staticfiles, so static files are served one way.
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "django_tables2",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    # sign-in throttling (rescaler/signin.py): failed attempts are kept in the database
    "axes",
    # the control plane's apps, bottom up: each imports only those above it in this list
    # (tests/unit/test_layering.py)
    "rescaler.audit",
    "rescaler.cluster",
    "rescaler.operations",
    "rescaler.runner",
    "rescaler.autoscaling",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # a read that finds Postgres restarting waits for it, a write gets 503 + Retry-After
    "rescaler.dbwait.DatabaseOutageMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # last, as django-axes requires: turns a locked-out sign-in into the lockout page
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "rescaler.urls"
WSGI_APPLICATION = "rescaler.wsgi.application"
ASGI_APPLICATION = "rescaler.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# django-axes' guard first: it refuses a locked-out client before the password is checked.
AUTHENTICATION_BACKENDS = [
    "rescaler.signin.RequestAxesBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- websockets ---------------------------------------------------------------------------------
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    },
}

# --- Celery (read by rescaler/celery.py with namespace="CELERY") --------------------------------
# https://docs.celeryq.dev/en/stable/userguide/configuration.html
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
# kombu's Redis transport with the fix in rescaler/broker.py (a worker holding tasks exited when
# Redis restarted); any other broker keeps its own transport
CELERY_BROKER_TRANSPORT = (
    "rescaler.broker:Transport" if CELERY_BROKER_URL.startswith("redis://") else None
)
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", REDIS_URL)
# Tests give each Celery worker a queue of its own so no other worker takes their tasks.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = TIME_ZONE
CELERY_RESULT_EXPIRES = 24 * 3600
CELERY_TASK_TRACK_STARTED = True
# A task is acknowledged after it ran, and redelivered if its worker dies mid-way: an operation
# step must survive a killed worker (invariant I6). Tasks must therefore be safe to repeat.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# One task at a time per process: a long step must not sit behind another in a prefetch buffer.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Explicit limits: a stuck task is interrupted (soft: SoftTimeLimitExceeded, to clean up) and
# then killed (hard), never left holding a worker forever.
CELERY_TASK_SOFT_TIME_LIMIT = int(env_float("CELERY_TASK_SOFT_TIME_LIMIT", 300))
CELERY_TASK_TIME_LIMIT = int(env_float("CELERY_TASK_TIME_LIMIT", 360))
# With acks_late on Redis, an unacknowledged task is redelivered after the visibility timeout;
# it must be longer than any task's run time, or a running task would be started twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_SEND_TASK_EVENTS = False

# --- abuse: sign-in lockout, API throttles (docs/configuration.md) ------------------------------
# How many proxies in front of daphne append to X-Forwarded-For: 0 believes only REMOTE_ADDR, so
# a client cannot pick its own address to dodge per-client limits. Behind one TLS proxy: 1.
RESCALER_TRUSTED_PROXIES = int(env_float("RESCALER_TRUSTED_PROXIES", 0))
# django-axes: after this many failed sign-ins (dashboard and admin) the client is locked out
# for the cool-off; a successful sign-in clears the count.
AXES_FAILURE_LIMIT = int(env_float("RESCALER_LOGIN_FAILURE_LIMIT", 5))
_login_cooloff_minutes = env_float("RESCALER_LOGIN_COOLOFF_MINUTES", 15)
# 0: locked until an administrator unlocks it (`python manage.py axes_reset`).
AXES_COOLOFF_TIME = timedelta(minutes=_login_cooloff_minutes) if _login_cooloff_minutes else None
# By default one user name from one client: a stranger cannot lock the admin out everywhere,
# nor can a shared address (a proxy not counted in RESCALER_TRUSTED_PROXIES) lock everyone out.
AXES_LOCKOUT_PARAMETERS = env_lockout_parameters("RESCALER_LOGIN_LOCKOUT_BY", "username+ip_address")
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "rescaler.signin.client_ip"
AXES_LOCKOUT_CALLABLE = "rescaler.signin.lockout_response"
# DRF throttles (dashboard/api/throttles.py): unsafe API requests per user, and failed token
# authentications per client. Empty or "off" turns one off. They count in the default cache
# (local memory): one daphne process serves the API, so its counts are the whole truth.
RESCALER_THROTTLE_MUTATIONS = env_rate("RESCALER_THROTTLE_MUTATIONS", "30/minute")
RESCALER_THROTTLE_BAD_TOKENS = env_rate("RESCALER_THROTTLE_BAD_TOKENS", "10/minute")

# --- REST API -----------------------------------------------------------------------------------
REST_FRAMEWORK = {
    # Token first: its WWW-Authenticate header makes an anonymous request a 401 (with session
    # auth first DRF answers 403, which would not tell a client to authenticate). The token
    # class also answers 429 to a client that keeps sending wrong tokens.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "dashboard.api.throttles.ThrottledTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # request bodies are strict JSON only: no NUL, lone surrogate, duplicate key or deep nesting
    # (each ended in a 500 further down), at most DATA_UPLOAD_MAX_MEMORY_SIZE (413 beyond)
    "DEFAULT_PARSER_CLASSES": ["dashboard.api.parsers.StrictJSONParser"],
    # POST/PUT/PATCH/DELETE per user; rates come from RESCALER_THROTTLE_* (read per request)
    "DEFAULT_THROTTLE_CLASSES": ["dashboard.api.throttles.MutationRateThrottle"],
    "NUM_PROXIES": RESCALER_TRUSTED_PROXIES,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # every refusal as {"code", "detail"} with a 4xx (docs/api.md, "Errors")
    "EXCEPTION_HANDLER": "dashboard.api.errors.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Rescaler API",
    "DESCRIPTION": "Rescale keyed stateful streaming pipelines while they run.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and ReDoc from the sidecar package: the dashboard works without internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # request bodies get their own components (the operation request is not an operation)
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    # One name per choice set, so that two fields called "status" (an operation's, a pipeline's)
    # do not collide (drf_spectacular.W001). The protocol's enums are named through the lists
    # the fields use (dashboard/api/serializers/enums.py): an override must match a field's choices.
    "ENUM_NAME_OVERRIDES": {
        "OperationStatusEnum": "dashboard.api.serializers.enums.OPERATION_STATUS_CHOICES",
        "StepPhaseEnum": "dashboard.api.serializers.enums.STEP_PHASE_CHOICES",
        "StrategyEnum": "dashboard.api.serializers.enums.STRATEGY_CHOICES",
        "ChangeKindEnum": "dashboard.api.serializers.enums.CHANGE_KIND_CHOICES",
        "PipelineStatusEnum": "rescaler.cluster.models.Pipeline.Status",
        "WorkerStatusEnum": "rescaler.cluster.models.WORKER_STATUS_CHOICES",
        "ParallelUnitStatusEnum": "rescaler.cluster.models.ParallelUnit.Status",
        "DecisionKindEnum": "dashboard.api.autoscaling.DECISION_KIND_CHOICES",
        "AutoscalingModeEnum": "dashboard.api.autoscaling.MODE_CHOICES",
        "DecisionOutcomeEnum": "dashboard.api.decisions.DECISION_OUTCOME_CHOICES",
    },
}

# /metrics (Prometheus): unauthenticated by default, as scrapers on an internal network expect;
# set it to 1 to require a token (`Authorization: Token <key>`) or a logged-in session.
RESCALER_METRICS_REQUIRE_AUTH = env_bool("RESCALER_METRICS_REQUIRE_AUTH", False)
# /api/schema/, /api/docs/, /api/redoc/ for anyone (on) or signed-in users only (off).
RESCALER_PUBLIC_API_DOCS = env_bool("RESCALER_PUBLIC_API_DOCS", False)
# /healthz always answers anyone with the overall and per-component status; this also shows
# anonymous callers each component's details and errors, which name internal hosts.
RESCALER_PUBLIC_HEALTH_DETAILS = env_bool("RESCALER_PUBLIC_HEALTH_DETAILS", False)

# --- logging ------------------------------------------------------------------------------------
LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's request log repeats what daphne already prints.
        "django.request": {"level": "ERROR"},
    },
}
