package main

// docs/config.md is generated from the configuration's types, defaults and
// field comments by a test, which fails when the committed copy differs.
//go:generate go test -run TestConfigReference -update .
