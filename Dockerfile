# The consumers, the HTTP API and the CLI in one image: `docker run timeline-fanout consume graph`.
# Builds with Docker (BuildKit or the classic builder) and with podman/buildah. BASE_IMAGE is any
# Debian-like image with python3 (>= 3.11) and its venv module; `.ci/build-images` passes one
# made from Debian's packages (no registry needed) and puts wheels built on the host in
# ./wheelhouse, so that nothing is downloaded inside the build.
ARG BASE_IMAGE=python:3.12-slim

# 1. Every wheel the product needs: those of ./wheelhouse when it holds any, else its own and its
#    dependencies' from the package index. (pyproject.toml is named beside the wildcard only so
#    that the COPY has a source when ./wheelhouse does not exist.)
FROM ${BASE_IMAGE} AS wheels
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /build
COPY pyproject.toml README.md ./
COPY src ./src
# The native core (Rust): building the wheel here needs cargo; `.ci/build-images` builds
# the wheels on the host instead (./wheelhouse).
COPY native ./native
COPY pyproject.toml wheelhous[e] /prebuilt/
RUN if ls /prebuilt/*.whl >/dev/null 2>&1; then mkdir /wheels && mv /prebuilt/*.whl /wheels/; \
    else python3 -m venv /tmp/pip && /tmp/pip/bin/pip wheel --quiet --wheel-dir /wheels .; fi

# 2. A virtual environment with the product installed from those wheels only.
FROM ${BASE_IMAGE} AS venv
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=wheels /wheels /wheels/
RUN python3 -m venv /opt/fanout \
    && /opt/fanout/bin/pip install --quiet --no-index --find-links /wheels timeline-fanout \
    && /opt/fanout/bin/pip uninstall --quiet --yes pip setuptools

# 3. The runtime: the base, a non-root user and the virtual environment; no sources, no tools.
FROM ${BASE_IMAGE}
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin fanout
COPY --from=venv /opt/fanout /opt/fanout
ENV PATH=/opt/fanout/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    FANOUT_HOME=/tmp/fanout
WORKDIR /tmp
USER fanout
# A consumer (`consume ... --metrics-port P`) records the port it serves metrics on in
# FANOUT_HOME; the check asks it for /metrics. The API's compose service checks /readyz instead.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=6 \
    CMD ["python", "-m", "timeline_fanout.healthcheck"]
ENTRYPOINT ["fanout"]
CMD ["--help"]
