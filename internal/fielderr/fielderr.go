// Package fielderr holds the error a policy package's Config validation
// returns: it names the invalid field as a Go path, so that a reader of a
// JSON document (package jsonconf) can name the same field by its JSON
// path.
package fielderr

import "fmt"

// Error is an invalid field of a package's Config. Its text reads
// "pkg: Config.Field msg".
type Error struct {
	Pkg   string // the package, "bulkhead"
	Field string // the Go path from Config: "Limit", "Reserve[critical]", "Endpoints[2].Name"
	Msg   string // what is wrong: "must be >= 1, got 0"
}

// New returns an *Error for field of pkg's Config, its message formatted
// from format and args.
func New(pkg, field, format string, args ...any) error {
	return &Error{Pkg: pkg, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Error returns "pkg: Config.Field msg".
func (e *Error) Error() string { return e.Pkg + ": Config." + e.Field + " " + e.Msg }
