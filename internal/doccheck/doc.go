// Package doccheck holds tests that keep the documentation in step with
// the code: docs/design.md's error table must name every sentinel error
// the public packages declare, and nothing else; and every test that
// docs/reliability.md, docs/benchmarks.md and docs/design.md name must
// exist.
package doccheck
