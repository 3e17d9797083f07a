// Package modcheck holds a test that builds txmsg the way a user's module
// does: outside this repository, from a go.mod that requires the root module
// and the nested adapter modules, with no workspace. See modules_test.go.
package modcheck
