# SPDX-License-Identifier: Apache-2.0
# The image of rdmagw-k8s, the node agent that writes the services file
# (docs/kubernetes.md; its DaemonSet: docker/kubernetes/rdmagw-k8s-daemonset.yaml).
# The build context is the agent's own directory:
#
#   podman build -f docker/rdmagw-k8s.Dockerfile -t rdmagw-k8s tools/rdmagw-k8s
#   docker build -f docker/rdmagw-k8s.Dockerfile -t rdmagw-k8s tools/rdmagw-k8s
#
# GO_IMAGE: any image with Go at least go.mod's version in /usr/local/go
# (the official golang images; tests/docker/e2e/run uses its Debian base
# with the host's Go mounted at /usr/local/go, having no registry).  The
# binary is static (CGO_ENABLED=0): the image holds nothing else, no shell,
# no libc, no certificates (in a pod, client-go trusts the service
# account's ca.crt).
ARG GO_IMAGE=golang:1.26-bookworm
FROM ${GO_IMAGE} AS build
ENV PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0 GOFLAGS=-trimpath
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY *.go ./
RUN go vet ./... && go build -ldflags "-s -w" -o /out/rdmagw-k8s .

FROM scratch
COPY --from=build /out/rdmagw-k8s /rdmagw-k8s
# Root without capabilities: the only thing it writes is the services file,
# into the node's directory that the kubelet creates root-owned (hostPath
# DirectoryOrCreate); the DaemonSet drops every capability and makes the
# root filesystem read-only.
USER 0:0
ENTRYPOINT ["/rdmagw-k8s"]
CMD ["--output", "/run/rdmagw-k8s/services.json"]
