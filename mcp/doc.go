// Package mcp is the Model Context Protocol vocabulary both awareness levels share: the protocol
// versions and what each one changes (Version), the HTTP headers MCP defines and how their values
// are read (DecodeHeaderValue, RedactURI, Accepts, PathOf), and what a request head says about
// MCP (Info, stored on an exchange by Level 1's classifier and read by everything after it).
//
// It is a leaf: it imports only the standard library, so level1 and level2 import it rather than
// each other, and a new protocol version is a change to version.go and its test.
package mcp
