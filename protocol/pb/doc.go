// Package pb holds the generated protobuf types of kith's wire protocol
// (kith.proto, package kith.v1). Only package protocol uses them; everything
// above it works with protocol's domain types.
//
// kith.pb.go is generated and committed. Regenerate it from this directory
// with protoc 3.21+ (Debian: apt-get install -y protobuf-compiler) and
// protoc-gen-go v1.36.11
// (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11):
//
//	protoc --go_out=. --go_opt=paths=source_relative kith.proto
//
// then run go test ./protocol -run Golden: the golden vectors must not move
// unless the schema change meant them to (then add -update and review the
// diff).
package pb

//go:generate protoc --go_out=. --go_opt=paths=source_relative kith.proto
