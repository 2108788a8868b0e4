# One image for every llog service: `llog broker`, `llog compactor`, and the CLI.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Metadata first so the dependency layer is reused when only the code changes.
COPY pyproject.toml README.md ./
COPY llog ./llog
COPY compactor ./compactor
RUN pip install . \
    && useradd --system --create-home --uid 10001 llog

USER llog
WORKDIR /home/llog
EXPOSE 8080 8081
ENTRYPOINT ["llog"]
CMD ["--help"]
