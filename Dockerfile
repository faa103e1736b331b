# syntax=docker/dockerfile:1
# The node agent image: docker build -t headroom:0.1.0 .
# Needs BuildKit (the default builder since Docker 23), which keeps the file capability set in the
# build stage when the binary is copied into the runtime image.

FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN apt-get update \
 && apt-get install -y --no-install-recommends libcap2-bin \
 && rm -rf /var/lib/apt/lists/*
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY benches benches
COPY examples examples
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile agent --locked --bin headroom \
 && cp target/agent/headroom /headroom
# A non-root process gains DAC_READ_SEARCH only from the file's capability set (Kubernetes has no
# ambient capabilities); the DaemonSet's bounding set allows this one and nothing else.
RUN setcap cap_dac_read_search=+ep /headroom && getcap /headroom

# glibc and libgcc, CA roots and nothing else; no shell. The API server's CA comes from the
# service account mount, so no system trust store is consulted.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /headroom /usr/local/bin/headroom
USER 65532:65532
EXPOSE 9737
ENTRYPOINT ["/usr/local/bin/headroom"]
CMD ["agent"]
