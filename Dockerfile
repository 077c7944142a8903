# cudasched: one image for the webhook (`cudasched webhook`) and the node agent (`cudasched agent`).
# Build: docker build -t cudasched/cudasched:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m venv /opt/cudasched \
 && /opt/cudasched/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/cudasched/bin/pip install --no-cache-dir .

FROM python:3.11-slim
# NVML (libnvidia-ml.so.1) is not in the image: on GPU nodes the NVIDIA container toolkit mounts the
# host driver's libraries when the agent pod runs with NVIDIA_VISIBLE_DEVICES=all.
COPY --from=build /opt/cudasched /opt/cudasched
ENV PATH=/opt/cudasched/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532 = the conventional "nonroot" uid; the webhook needs no privileges at all.
USER 65532:65532
ENTRYPOINT ["cudasched"]
CMD ["webhook", "--config", "/config/config.yaml"]
