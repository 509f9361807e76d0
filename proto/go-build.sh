#!/usr/bin/env bash
# The protos' Go build check (`make lint`): the Go code a Kubernetes
# scheduler plugin or Kueue integration would generate from them compiles and
# vets. Debian's protoc-gen-go and protoc-gen-go-grpc generate it; Debian's
# google.golang.org/protobuf and grpc sources build it, in GOPATH mode (no
# module proxy needed). Nothing is kept but Go's build cache.
# Usage: proto/go-build.sh BUF GOCACHE_DIR
set -euo pipefail
buf=$1
export GOCACHE=$(realpath -m "$2")
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$buf" generate "$root/proto" --template "$root/proto/buf.gen.yaml" -o "$work"
pkg=$(sed -n 's/^option go_package = "\([^;]*\);.*/\1/p' "$root/proto/railyard/v1/common.proto")
mkdir -p "$work/gopath/src/$pkg"
cp "$work"/gen/go/railyard/v1/*.go "$work/gopath/src/$pkg/"
export GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOFLAGS=
go build "$pkg"
go vet "$pkg"
echo "proto-go: $pkg builds and vets ($(go version | cut -d' ' -f3))"
