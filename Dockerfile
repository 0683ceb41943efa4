# jobvisor's container image: built in a Rust image, run from a slim Debian one as a non-root
# user, its catalog and data in a volume. See the README's "Running in a container".
#
#   docker build -t jobvisor .
#   docker run -d --name jv -p 7878:7878 -v jobvisor-data:/var/lib/jobvisor \
#       --memory 512m --cpus 1 jobvisor
#
# The node reads --memory/--cpus from its cgroup and plans within them.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin jobvisor \
    && strip target/release/jobvisor

FROM debian:bookworm-slim
# Only what the binary links (glibc, libgcc) and CA certificates for url jobs over https.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/jobvisor --shell /usr/sbin/nologin jobvisor \
    && mkdir -p /var/lib/jobvisor \
    && chown jobvisor:jobvisor /var/lib/jobvisor
COPY --from=builder /src/target/release/jobvisor /usr/local/bin/jobvisor
USER 10001:10001
WORKDIR /var/lib/jobvisor
VOLUME ["/var/lib/jobvisor"]
# Loopback until the catalog has a user (the node refuses another address without one): add
# one, then set JOBVISOR__HTTP__BIND=0.0.0.0:7878 to publish the port.
ENV JOBVISOR__NODE__DATA_DIR=/var/lib/jobvisor \
    JOBVISOR__HTTP__BIND=127.0.0.1:7878
EXPOSE 7878
# /healthz needs no credentials; bash's /dev/tcp spares the image an HTTP client.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/7878 && printf 'GET /healthz HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/jobvisor"]
CMD ["run"]
