// Package level1 implements awareness Level 1 of the draft's Transparent mode: it frames HTTP/1.x
// in both directions, extracts MCP metadata from headers only, applies header policy and rate
// limits, and forwards every byte unmodified.
package level1
