// Package mcp is the Model Context Protocol vocabulary both awareness levels share: the protocol
// versions and what each one changes (Version), the HTTP headers MCP defines and how their values
// are read (DecodeHeaderValue, RedactURI, Accepts, PathOf), what a request head says about MCP
// (Info, stored on an exchange by Level 1's classifier and read by everything after it), and the
// strict JSON-RPC 2.0 codec Level 2 reads bodies with (Decode, Message, EncodeError).
//
// The codec is strict where encoding/json is lenient, because a body that the appliance and the
// server read differently is a smuggling hole (go-sdk #805): a duplicate key, two keys equal
// under Unicode folding, a misspelt member name Level 2 reads, invalid UTF-8, an escaped lone
// surrogate, a numeric id that is no exact integer, nesting past a depth and a body past a size
// are all refused. Its navigation helpers (Member, MemberSpan, Elements, SkipValue, Unquote,
// DecodeValue) read only what the decoder has validated, by the same rules.
//
// It is a leaf: it imports only the standard library and exchange/httptok (the HTTP token
// rules), so level1 and level2 import it rather than each other, and a new protocol version is a
// change to version.go and its test.
package mcp
