# memory_sql with its HTTP service (the server extra), as docker-compose.yml runs it:
#   docker build -t memory-sql .
#   docker run --rm -e MEMORY_SQL_DATABASE_URL=postgresql://memory_app:…@db/memory -p 8080:8080 memory-sql
# The same image runs the API (the default command), `memory-sql worker` and `memory-sql db …`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the wheel is built from (the migrations under alembic/ ship inside it).
WORKDIR /build
COPY pyproject.toml README.md LICENSE ./
COPY alembic ./alembic
COPY memory_sql ./memory_sql
RUN pip install '.[server]' && rm -rf /build

# Nothing runs as root; the processes keep no state on disk (it is all in PostgreSQL).
RUN useradd --create-home --uid 10001 memory
USER memory
WORKDIR /home/memory

EXPOSE 8080
CMD ["memory-sql", "serve", "--host", "0.0.0.0", "--port", "8080", "--no-worker"]
