// Package nilcheck tells an interface holding a nil pointer from a usable
// value, for the constructors of the watertight module and of its nested
// modules (redisstate imports it). Go lets any package whose import path
// is under github.com/watertight/watertight import the module's internal
// packages, whichever module it belongs to (golang.org/x/tools/gopls does
// the same). It is internal: users never need it.
package nilcheck
