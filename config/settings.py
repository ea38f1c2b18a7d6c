"""Boxyard's settings: one module, driven by the environment.

Every value has a safe local default so that `bin/run` works on a fresh machine with
nothing configured (SQLite, an in-memory channel layer, the local Docker Engine).
Production deployments set the variables listed in the README.
"""

import os
import re
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from config import ratelimit as _ratelimit
from config.env import env_bool, env_float, env_int, env_list, env_str

# Django's generic classes (ModelAdmin[Pipeline], QuerySet[Sandbox]) take their type
# parameters at run time too, as the type checker reads them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("BOXYARD_DATA_DIR", str(BASE_DIR / "var"))).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)


def _secret_key() -> str:
    """The configured key, or one generated once and kept in the data directory."""
    if key := env_str("BOXYARD_SECRET_KEY", ""):
        return key
    path = DATA_DIR / "secret_key"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("BOXYARD_DEBUG", False)
ALLOWED_HOSTS = env_list("BOXYARD_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("BOXYARD_CSRF_TRUSTED_ORIGINS", [])


def _e2b_domain() -> str:
    """The domain E2B's SDKs are given as E2B_DOMAIN (`boxyard.example.com`), under which
    Boxyard serves E2B's APIs by host name (`sandboxes.e2b.hostnames`); "" for none."""
    domain = env_str("BOXYARD_E2B_DOMAIN", "").strip().lower().rstrip(".")
    labels = domain.split(".")
    if domain and (
        len(labels) < 2
        or not all(re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", x) for x in labels)
    ):
        raise ImproperlyConfigured(
            f"BOXYARD_E2B_DOMAIN={domain!r} is not a domain name such as boxyard.example.com "
            "(no scheme, port or path)"
        )
    return domain


BOXYARD_E2B_DOMAIN = _e2b_domain()
if BOXYARD_E2B_DOMAIN:
    # The control plane's name reaches Django; a sandbox's (`<port>-<id>.<domain>`) goes to
    # the E2B sandbox API before Django, which is all it serves.
    ALLOWED_HOSTS.append(f"api.{BOXYARD_E2B_DOMAIN}")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "ninja",
    "axes",
    "csp",
    "hosts",
    "pipelines",
    "sandboxes",
    "sandboxes.bay",
]

MIDDLEWARE = [
    "boxyard.later.SettleLater",  # first: what a long call answers, where no loop settles it
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "config.middleware.JSONErrorsForAPI",
    "axes.middleware.AxesMiddleware",  # last: turns a lockout into the page that says so
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = "config.wsgi.application"

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

# --- Database -----------------------------------------------------------------------------
# SQLite by default. Every transaction starts IMMEDIATE so that a read-then-write (the lease
# check, the get-or-create of a sandbox) is serialized instead of failing with "database is
# locked" when it upgrades; WAL lets readers go on meanwhile.
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'boxyard.sqlite3'}"),
    )
}
_SQLITE = DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
# Connections kept open (seconds): SQLite's cost nothing to keep; a PostgreSQL server's are
# counted, so there it is the operator's choice.
DATABASES["default"]["CONN_MAX_AGE"] = env_int(
    "BOXYARD_DB_CONN_MAX_AGE", 600 if _SQLITE else 0, minimum=0
)
if _SQLITE:
    DATABASES["default"]["ENGINE"] = "boxyard.db.sqlite3"  # writers queue in the process
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file (threads in tests need a shared database), one per test run so runs never collide.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / f"test-{os.getpid()}.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- Languages: the eight the dashboard and the scope presets ship in ----------------------
LANGUAGE_CODE = "en"
LANGUAGES = [
    ("en", "English"),
    ("zh-hans", "简体中文"),
    ("zh-hant", "繁體中文"),
    ("ja", "日本語"),
    ("ko", "한국어"),
    ("es", "Español"),
    ("fr", "Français"),
    ("ru", "Русский"),
]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"  # filled by collectstatic (bin/run does it)
STATIC_ROOT.mkdir(exist_ok=True)
STATICFILES_DIRS: list[Path | tuple[str, str]] = [BASE_DIR / "static"]
# The terminal emulator of the dashboard: Debian's libjs-term.js (bin/setup installs it).
if Path("/usr/share/javascript/term.js").is_dir():
    STATICFILES_DIRS.append(("vendor/termjs", "/usr/share/javascript/term.js"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG

# --- Log-in throttling (django-axes) ----------------------------------------------------------
# BOXYARD_LOGIN_FAILURE_LIMIT wrong passwords for one user name from one address lock that
# name out from that address for BOXYARD_LOGIN_LOCKOUT_MINUTES (the right password included),
# and say so. The pair is locked, not the name alone, so guessing from elsewhere cannot lock an
# admin out. Attempts and lockouts are rows (axes' access attempts and failure log, shown in
# the admin site); `manage.py axes_reset_username NAME` lifts a lockout at once.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("BOXYARD_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("BOXYARD_LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_ENABLE_ACCESS_FAILURE_LOG = True
AXES_CLIENT_IP_CALLABLE = "config.login.client_address"
AXES_LOCKOUT_CALLABLE = "config.login.locked_out"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "fleet"
LOGOUT_REDIRECT_URL = "login"
# Largest request body the API reads (file writes come as JSON); bigger ones get 413 from the
# headers alone (config.gate), before a byte of the body is read. Uploads of any size stream
# through the raw-file, archive and link routes instead.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("BOXYARD_MAX_REQUEST_BYTES", 8 * 1024 * 1024, minimum=1024)
# Largest body taken from a caller without a credential (the login form, say).
BOXYARD_ANONYMOUS_REQUEST_BYTES = env_int(
    "BOXYARD_ANONYMOUS_REQUEST_BYTES", 64 * 1024, minimum=1024
)
# A client that sends nothing of its request's body for this long gets 408.
BOXYARD_BODY_IDLE_SECONDS = env_int("BOXYARD_BODY_IDLE_SECONDS", 30, minimum=1)
# Request bodies one caller may have in the server's memory at once (past it: 429).
BOXYARD_BODY_BYTES_PER_CALLER = env_int(
    "BOXYARD_BODY_BYTES_PER_CALLER",
    8 * DATA_UPLOAD_MAX_MEMORY_SIZE,
    minimum=DATA_UPLOAD_MAX_MEMORY_SIZE,
)
# Requests one pipeline token may make, as "N/second|minute|hour" (`off`: no limit); past
# it, 429 with Retry-After.
BOXYARD_RATE_LIMIT = env_str("BOXYARD_RATE_LIMIT", "600/minute")
try:
    _ratelimit.check(BOXYARD_RATE_LIMIT)
except ValueError as _error:
    raise ImproperlyConfigured(
        f"BOXYARD_RATE_LIMIT={BOXYARD_RATE_LIMIT!r} is not a rate such as 600/minute or off"
    ) from _error

# --- Channels and Celery ----------------------------------------------------------------------
# Embedded (the default): an in-memory broker and channel layer, and the Celery worker and
# beat scheduler run in threads of the web process (`manage.py serve`). Distributed: REDIS_URL
# is the broker and the channel layer, and web, worker and beat are separate processes
# (`celery -A config worker`, `celery -A config beat`). Either way the rows are the truth: a
# task lost with a crashed process is made good by the reconciler.
REDIS_URL = env_str("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "memory://")
_IN_MEMORY_BROKER = CELERY_BROKER_URL.startswith("memory://")
# Whether `manage.py serve` runs the worker and the scheduler in its own process.
BOXYARD_EMBEDDED_WORKER = env_bool("BOXYARD_EMBEDDED_WORKER", _IN_MEMORY_BROKER)
BOXYARD_WORKER_THREADS = env_int("BOXYARD_WORKER_THREADS", 8, minimum=1)
# The Docker hosts a worker serves (their names, comma-separated; `*`: all): it checks their
# health and follows their containers' events. The embedded worker serves all.
BOXYARD_WORKER_HOSTS = env_str("BOXYARD_WORKER_HOSTS", "*")
# Engine work for a Docker host (boot, destroy, reconcile, pool refill, image builds, moves)
# goes to that host's queue, `<queue>.host.<name>`, consumed by the workers that serve it.
# Off with the in-memory broker: its one worker serves every host.
BOXYARD_HOST_QUEUES = env_bool("BOXYARD_HOST_QUEUES", not _IN_MEMORY_BROKER)
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {"polling_interval": 0.02}  # the in-memory queue is polled: hand tasks over promptly
    if _IN_MEMORY_BROKER
    else {"visibility_timeout": 3600}  # longer than any task's time limit
)
# Installs that share a Redis keep to their own queue.
CELERY_TASK_DEFAULT_QUEUE = f"boxyard-{env_str('BOXYARD_DEPLOYMENT', 'default')}"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
# Periodic work (seconds between runs). Each run also takes a lock of its own in the
# database, so a second scheduler or a slow run never makes two at once.
BOXYARD_REAP_INTERVAL = env_float("BOXYARD_REAP_INTERVAL", 10.0, minimum=1)
BOXYARD_RECONCILE_INTERVAL = env_float("BOXYARD_RECONCILE_INTERVAL", 15.0, minimum=1)
BOXYARD_POOL_INTERVAL = env_float("BOXYARD_POOL_INTERVAL", 10.0, minimum=1)
# What the reconciler leaves alone because an operation may still be at work on it.
BOXYARD_RECONCILE_GRACE_SECONDS = env_float("BOXYARD_RECONCILE_GRACE_SECONDS", 30.0, minimum=0)
# Retention (sandboxes/services/pruning.py): the output stored with commands is cleared after
# this many days, and the oldest first while it all takes more than KEEP_MB; events, finished
# commands and destroyed sandboxes' rows are deleted after HISTORY days. A pass runs every
# PRUNE_INTERVAL seconds (and `manage.py prune`).
BOXYARD_OUTPUT_RETENTION_DAYS = env_float("BOXYARD_OUTPUT_RETENTION_DAYS", 7.0, minimum=0)
BOXYARD_OUTPUT_KEEP_MB = env_int("BOXYARD_OUTPUT_KEEP_MB", 256, minimum=0)
BOXYARD_HISTORY_RETENTION_DAYS = env_float("BOXYARD_HISTORY_RETENTION_DAYS", 30.0, minimum=0)
BOXYARD_PRUNE_INTERVAL_SECONDS = env_float("BOXYARD_PRUNE_INTERVAL_SECONDS", 60.0, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "reap": {"task": "sandboxes.reap", "schedule": BOXYARD_REAP_INTERVAL},
    "reconcile": {"task": "sandboxes.reconcile", "schedule": BOXYARD_RECONCILE_INTERVAL},
    "refill-pools": {"task": "sandboxes.refill_pools", "schedule": BOXYARD_POOL_INTERVAL},
    "sample-fleet": {"task": "sandboxes.sample_fleet", "schedule": 60.0},
    "prune": {"task": "sandboxes.prune", "schedule": BOXYARD_PRUNE_INTERVAL_SECONDS},
}

# --- HTTPS and cookies: production sets BOXYARD_HTTPS=true behind TLS -----------------------
HTTPS = env_bool("BOXYARD_HTTPS", False)
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS and env_bool("BOXYARD_SSL_REDIRECT", True)
SECURE_HSTS_SECONDS = env_int("BOXYARD_HSTS_SECONDS", 31_536_000 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = env_bool("BOXYARD_HSTS_PRELOAD", False)
BOXYARD_BEHIND_PROXY = env_bool("BOXYARD_BEHIND_PROXY", False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if BOXYARD_BEHIND_PROXY else None
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy: nothing from another origin, and no inline script or event handler
# (the dashboard's scripts are static files). Two exceptions, neither of which can run code or
# reach another origin: inline style attributes (the terminal emulator colours its text with
# them) and data: images (the API's browsable documentation draws its icons with them).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "style-src-attr": [UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],  # the dashboard's websockets: same origin
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}
SILENCED_SYSTEM_CHECKS = [] if env_bool("BOXYARD_HSTS_PRELOAD", False) else ["security.W021"]

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("BOXYARD_LOG_LEVEL", "INFO")},
}

# --- Sandboxes ------------------------------------------------------------------------------
# Images Boxyard builds itself (see `manage.py build_images`); the tag changes with the recipe.
BOXYARD_DEFAULT_IMAGE = env_str("BOXYARD_DEFAULT_IMAGE", "boxyard/default:1")
BOXYARD_TEST_IMAGE = env_str("BOXYARD_TEST_IMAGE", "boxyard/busybox:1")
# The default image's Debian without the code interpreter (a tenth of its size).
BOXYARD_BASE_IMAGE = env_str("BOXYARD_BASE_IMAGE", "boxyard/base:1")
# The image of each engine's workspace disk keeper (it needs mkfs.ext4, losetup and flock).
BOXYARD_DISK_IMAGE = env_str("BOXYARD_DISK_IMAGE", BOXYARD_BASE_IMAGE)
# Images a pipeline may name: exact references or shell-style patterns (`python:3.*`).
BOXYARD_IMAGE_ALLOWLIST = env_list(
    "BOXYARD_IMAGE_ALLOWLIST", [BOXYARD_DEFAULT_IMAGE, BOXYARD_TEST_IMAGE]
)
BOXYARD_DOCKER_HOST = env_str("BOXYARD_DOCKER_HOST", env_str("DOCKER_HOST", ""))
# Labels every container and volume carries; separates installs sharing one engine.
BOXYARD_DEPLOYMENT = env_str("BOXYARD_DEPLOYMENT", "default")
# The non-root user sandboxes run as (uid:gid).
BOXYARD_SANDBOX_USER = env_str("BOXYARD_SANDBOX_USER", "10001:10001")
# Host directories that skills may be mounted from.
BOXYARD_SKILL_ROOTS = env_list("BOXYARD_SKILL_ROOTS", [str(DATA_DIR / "skills")])

# Operator maximums: a pipeline may loosen its profile up to these and no further.
BOXYARD_MAX_CPUS = env_float("BOXYARD_MAX_CPUS", 4.0, minimum=0.01)
BOXYARD_MAX_MEMORY_MB = env_int("BOXYARD_MAX_MEMORY_MB", 8192, minimum=16)
BOXYARD_MAX_PIDS = env_int("BOXYARD_MAX_PIDS", 1024, minimum=8)
BOXYARD_MAX_WORKSPACE_MB = env_int("BOXYARD_MAX_WORKSPACE_MB", 20480, minimum=1)
BOXYARD_MAX_TMP_MB = env_int("BOXYARD_MAX_TMP_MB", 2048, minimum=1)
BOXYARD_MAX_EXEC_TIMEOUT = env_int("BOXYARD_MAX_EXEC_TIMEOUT", 900, minimum=1)
BOXYARD_MAX_OUTPUT_BYTES = env_int("BOXYARD_MAX_OUTPUT_BYTES", 4 * 1024 * 1024, minimum=1024)
BOXYARD_MAX_LIVE_SANDBOXES = env_int("BOXYARD_MAX_LIVE_SANDBOXES", 200, minimum=1)
BOXYARD_MAX_TTL_SECONDS = env_int("BOXYARD_MAX_TTL_SECONDS", 7 * 24 * 3600, minimum=60)
BOXYARD_ALLOW_NETWORK = env_bool("BOXYARD_ALLOW_NETWORK", False)
# How long an admin's takeover may hold a sandbox at most (0: until released). The sandbox's
# own time to live still ends it.
BOXYARD_TAKEOVER_MAX_SECONDS = env_int("BOXYARD_TAKEOVER_MAX_SECONDS", 0, minimum=0)
# Default cap on what one exec returns per stream.
BOXYARD_EXEC_OUTPUT_BYTES = env_int("BOXYARD_EXEC_OUTPUT_BYTES", 256 * 1024, minimum=1024)
# Threads serving sandbox API calls. A call waiting for a command holds a thread (not a
# database connection) for as long as the command runs.
BOXYARD_API_THREADS = env_int("BOXYARD_API_THREADS", 256, minimum=1)
# Threads of that pool one caller (a pipeline's token, an admin, an address without either)
# may hold at once; its further requests wait their turn without a thread, up to
# BOXYARD_QUEUED_PER_CALLER of them, and past that get 429.
BOXYARD_THREADS_PER_CALLER = env_int(
    "BOXYARD_THREADS_PER_CALLER", max(1, BOXYARD_API_THREADS // 8), minimum=1
)
BOXYARD_QUEUED_PER_CALLER = env_int("BOXYARD_QUEUED_PER_CALLER", 256, minimum=0)
# Of those threads, how many run at once (the rest wait in order, holding their thread): a
# thread waiting on the engine, a sandbox or a client's body lets its turn go meanwhile.
# Python runs one thread at a time, so more shares the interpreter less fairly among callers.
BOXYARD_RUNNING_PER_CALLER = env_int("BOXYARD_RUNNING_PER_CALLER", 1, minimum=1)
# Long calls (waiting for an exec, following its output, an MCP tool's progress) one pipeline
# may have open at once; past it, 429 with Retry-After. They hold no thread while they wait.
BOXYARD_LONG_CALLS_PER_PIPELINE = env_int("BOXYARD_LONG_CALLS_PER_PIPELINE", 64, minimum=1)
# What E2B's sandbox API keeps in a web process's memory for one pipeline: open ptys (a pty is
# the socket of the process that started it) and polling watchers of a directory (each holds
# the last listing it saw); past either, 429 with Retry-After.
BOXYARD_E2B_PTYS_PER_PIPELINE = env_int("BOXYARD_E2B_PTYS_PER_PIPELINE", 16, minimum=1)
BOXYARD_E2B_WATCHERS_PER_PIPELINE = env_int("BOXYARD_E2B_WATCHERS_PER_PIPELINE", 64, minimum=1)
# The Bay API's `Idempotency-Key`s: how long an answer is kept to be replayed, and how many
# keys one pipeline may hold at once (past it, 429 until the oldest lapse).
BOXYARD_BAY_IDEMPOTENCY_SECONDS = env_int("BOXYARD_BAY_IDEMPOTENCY_SECONDS", 3600, minimum=1)
BOXYARD_BAY_IDEMPOTENCY_KEYS = env_int("BOXYARD_BAY_IDEMPOTENCY_KEYS", 1000, minimum=1)
# The sandbox agent (built from agent/ by bin/setup), mounted read-only into new sandboxes.
# It is required: without it no sandbox starts (503, saying to run bin/setup), and a sandbox
# made without it, or with an older one, is restarted with it at its next use.
BOXYARD_AGENT_BINARY = env_str(
    "BOXYARD_AGENT_BINARY", str(BASE_DIR / "var" / "agent" / "boxyard-agent")
)
# Output an agent keeps per exec (beyond what an exec's answer carries), for later reads.
# Files go to and from a sandbox's agent over its own socket where this process can reach it
# (the engine on this machine, Boxyard as root); off, or elsewhere, through the engine's execs.
BOXYARD_AGENT_DIRECT = env_bool("BOXYARD_AGENT_DIRECT", True)
BOXYARD_EXEC_KEEP_BYTES = env_int("BOXYARD_EXEC_KEEP_BYTES", 16 * 1024 * 1024, minimum=1024)
# Output an agent keeps in all, for all the commands of its sandbox (running, or finished and
# not yet let go); past it the oldest goes. Never more than the sandbox's memory limit / 16.
BOXYARD_AGENT_OUTPUT_BYTES = env_int(
    "BOXYARD_AGENT_OUTPUT_BYTES", 32 * 1024 * 1024, minimum=64 * 1024
)
# The bearer token a Prometheus scraper sends to /metrics (admins' sessions work too).
BOXYARD_METRICS_TOKEN = env_str("BOXYARD_METRICS_TOKEN", "")
# Default cap on what one file read returns.
BOXYARD_FILE_READ_BYTES = env_int("BOXYARD_FILE_READ_BYTES", 256 * 1024, minimum=1)
# The longest a signed link of a file may live.
BOXYARD_FILE_LINK_MAX_SECONDS = env_int("BOXYARD_FILE_LINK_MAX_SECONDS", 7 * 24 * 3600, minimum=1)
# An MCP session of the handshake revisions that no request has touched for this long ends.
BOXYARD_MCP_SESSION_IDLE_SECONDS = env_int("BOXYARD_MCP_SESSION_IDLE_SECONDS", 1800, minimum=1)
# An MCP session that got no request but its `initialize` ends after this long (the full idle
# time above once it has been used).
BOXYARD_MCP_UNUSED_SESSION_SECONDS = env_int("BOXYARD_MCP_UNUSED_SESSION_SECONDS", 60, minimum=1)
# The MCP sessions one pipeline may have open in a web process, all of its tokens together.
BOXYARD_MCP_SESSIONS_PER_PIPELINE = env_int("BOXYARD_MCP_SESSIONS_PER_PIPELINE", 200, minimum=1)
# What an uploaded archive may expand to: entries, and bytes (never more than the workspace).
BOXYARD_ARCHIVE_MAX_ENTRIES = env_int("BOXYARD_ARCHIVE_MAX_ENTRIES", 100_000, minimum=1)
BOXYARD_ARCHIVE_MAX_BYTES = env_int("BOXYARD_ARCHIVE_MAX_BYTES", 10 * 1024**3, minimum=1)
