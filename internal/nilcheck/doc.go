// Package nilcheck tells an interface holding a nil pointer from a usable
// value, for the constructors of this module.
package nilcheck
