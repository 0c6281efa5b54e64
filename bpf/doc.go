// Package bpf holds the eBPF C sources and the bpf2go-generated loaders for the cgroup connect
// steering mechanism. It contains no Go logic beyond the generated code; the attach and map
// handling lives in package intercept.
package bpf
