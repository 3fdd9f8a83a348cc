# syntax=docker/dockerfile:1
#
# tidemark-mirror and tidemark-inventory as static (musl) binaries on a distroless base that
# runs as uid 65532, the runAsUser of deploy/operator.yaml and of the agent pods it creates.
#
#   docker build -t tidemark:dev .
#   docker run --rm tidemark:dev --help                      # tidemark-mirror
#   docker run --rm --entrypoint /tidemark-inventory tidemark:dev --help
#
# The build steps are the ones scripts/build-static.sh runs on a Debian host.

FROM docker.io/library/rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools protobuf-compiler \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    scripts/build-static.sh /out

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tidemark-mirror /out/tidemark-inventory /
USER 65532:65532
ENTRYPOINT ["/tidemark-mirror"]
