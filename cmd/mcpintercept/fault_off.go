//go:build !faultinject

package main

// armFault does nothing in a normal build; a `-tags faultinject` build can kill itself with a
// real fatal runtime error on request (fault_on.go), for the tests of the supervisor.
func armFault() {}
