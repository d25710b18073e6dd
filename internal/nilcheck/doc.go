// Package nilcheck tells an interface holding a nil pointer from a usable
// value. fallback's counter cache and redisstate's constructors (a nested
// module) use it; internal/telemetry (isNilPointer) and compose (inline,
// in its Policies check) still keep copies of the same check of their
// own. Go lets any package whose
// import path is under github.com/watertight/watertight import the
// module's internal packages, whichever module it belongs to
// (golang.org/x/tools/gopls does the same). It is internal: users never
// need it.
package nilcheck
