// Package tlsmitm peeks TLS ClientHellos without consuming them, terminates client TLS with leaves
// minted by package pki, and re-originates verified TLS to the original destination. It never
// launders an invalid upstream certificate into a valid one.
package tlsmitm
