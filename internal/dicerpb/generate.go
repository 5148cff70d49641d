// Package dicerpb holds the generated Go code for caddy-dicer's subset of the
// Dicer daemon's gRPC API (dicerd.v1, scheme B). Do not edit the .pb.go files;
// change dicerd.proto and run go generate.
package dicerpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative dicerd.proto
