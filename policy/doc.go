// Package policy compiles and evaluates the rule language (CEL) into decisions. It performs no I/O.
package policy
