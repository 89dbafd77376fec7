# The inorder worker: "inorder run" consumes EventStoreDB/KurrentDB into
# PostgreSQL read models (see docker-compose.yml).
# Build: docker build --build-arg VERSION=v1.2.3 --build-arg REVISION=$(git rev-parse HEAD) -t inorder .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# .git is not sent (.dockerignore), so the build has no VCS information:
# the version (and revision) are stamped explicitly.
ARG VERSION=dev
ARG REVISION=
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}${REVISION:++${REVISION}}" -o /out/inorder ./cmd/inorder

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/inorder /usr/local/bin/inorder
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=6 \
  CMD ["/usr/local/bin/inorder", "healthcheck", "--live"]
ENTRYPOINT ["/usr/local/bin/inorder"]
CMD ["--help"]
