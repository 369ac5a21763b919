# syntax=docker/dockerfile:1
# A static tripswitch binary on distroless: no shell, no package manager,
# runs as UID 65532. Multi-arch: docker buildx build --platform
# linux/amd64,linux/arm64 --build-arg VERSION=$(git describe --tags) -t IMAGE .
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS TARGETARCH VERSION=devel
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/tripswitch/ cmd/tripswitch/
COPY internal/ internal/
# The same flags as `make build`, which CI runs.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/tripswitch ./cmd/tripswitch

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/tripswitch /tripswitch
USER 65532:65532
ENTRYPOINT ["/tripswitch"]
