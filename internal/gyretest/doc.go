// Package gyretest holds helpers shared by the tests of several packages.
// Nothing outside tests imports it.
package gyretest
