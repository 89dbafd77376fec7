# The inorder worker: "inorder run" consumes EventStoreDB into PostgreSQL read
# models (see docker-compose.yml). Build: docker build -t inorder .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/inorder ./cmd/inorder

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/inorder /usr/local/bin/inorder
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/inorder"]
CMD ["--help"]
