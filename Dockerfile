# One image for every process of the production shape (docker-compose.yml): daphne, the Celery
# worker, the pipeline runner (Spark driver), and the Spark master and workers. Spark's Python
# workers must run the same Python and the same `workers/` code as the driver, so they share it.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Java 17 runs Spark (pyspark ships Spark's jars and bin/spark-class, not a JVM), and its javac
# builds the class that pins each PU's task to its executor (workers/pinning.py); procps gives
# Spark's scripts `ps`.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jdk-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Runtime dependencies only, at the exact versions of the lock file.
COPY requirements.txt requirements.lock ./
RUN pip install -r requirements.txt -c requirements.lock

COPY . .

ENV DJANGO_SETTINGS_MODULE=rescaler.settings.production \
    PYTHONPATH=/app \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python \
    STATE_DIR=/var/lib/rescaler/state \
    RESCALER_JVM_DIR=/app/var/jvm
ENV PATH="${SPARK_HOME}/bin:${PATH}"

# The pinning class, built once into the image for its Spark.
RUN python -m workers.pinning /app/var/jvm

# Static files are collected into the image; WhiteNoise serves them from daphne.
RUN SECRET_KEY=collectstatic-only ALLOWED_HOSTS=build python manage.py collectstatic --noinput

RUN useradd --create-home --uid 1000 rescaler \
    && mkdir -p /var/lib/rescaler/state \
    && chown -R rescaler:rescaler /var/lib/rescaler /app/var
USER rescaler

EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "rescaler.asgi:application"]
