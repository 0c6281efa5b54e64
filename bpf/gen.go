package bpf

// The generated steer_bpfel.go and steer_bpfel.o are committed, so building needs no clang;
// scripts/check-bpf-generated.sh regenerates them in CI and fails on a difference.
//go:generate go tool bpf2go -tags linux -target bpfel -cflags "-O2 -g -Wall -Werror" Steer steer.c
