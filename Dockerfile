# The consumers and the CLI in one image: `docker run timeline-fanout consume graph`.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    FANOUT_HOME=/tmp/fanout

WORKDIR /app
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install . \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin fanout

USER fanout
ENTRYPOINT ["fanout"]
CMD ["--help"]
