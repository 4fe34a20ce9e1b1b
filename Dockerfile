# The one image progressive-sync ships: the watcher runs `progressive-sync watch`, and every
# Workflow step runs `python -m steps <step>` from the same image (the Workflow sets the command).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY orchestrator ./orchestrator
COPY steps ./steps
COPY workflow_templates ./workflow_templates
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
USER 65532:65532
ENTRYPOINT ["progressive-sync"]
