// Package nilcheck tells an interface holding a nil pointer from a usable
// value, for the constructors of the watertight module and of its nested
// modules (redisstate, grpcpolicy), which import it: a Go import path
// under github.com/watertight/watertight may import the module's
// internal packages, whichever module it belongs to. It is internal:
// users never need it.
package nilcheck
